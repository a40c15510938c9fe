"""What the API server does with an EmbeddingService before the operator sees it: fill the
CRD's defaults, validate the structural schema with unknown fields refused (kubectl's strict
field validation), and evaluate every CEL rule (`x-kubernetes-validations`) with cel-python.
kmock does none of this, so the tests that judge specs use this stand-in. Kubernetes' list
extension `isSorted()` is supplied as a function (cel-python has the CEL standard library)."""

import copy
import functools

import celpy
import jsonschema

from hedgerow.operator import crd
from hedgerow.operator.spec import apply_defaults


class Refused(Exception):
    """The API server would answer 422; `path` is the field, `message` what it says."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def strict_json_schema(node: dict) -> dict:
    """A JSON Schema (draft 2020-12) from the structural schema: objects with declared
    properties reject unknown fields; Kubernetes extensions are dropped."""
    out: dict = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: strict_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = strict_json_schema(value)
        elif key == "anyOf":
            out[key] = [strict_json_schema(v) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)  # a pattern applies only to strings in JSON Schema
    if node.get("type") == "object" and "properties" in node and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


VALIDATOR = jsonschema.Draft202012Validator(strict_json_schema(crd.ROOT))
ENV = celpy.Environment()


def _is_sorted(items):
    return celpy.celtypes.BoolType(all(a <= b for a, b in zip(items, items[1:])))


@functools.cache
def program(cel: str):
    return ENV.program(ENV.compile(cel), functions={"isSorted": _is_sorted})


def holds(cel: str, value) -> bool:
    """The rule's verdict on `value` (bound to `self`); an evaluation error refuses."""
    result = program(cel).evaluate({"self": celpy.json_to_cel(value)})
    return not isinstance(result, celpy.CELEvalError) and bool(result)


def rules_on(node: dict, value, path: str = "root"):
    """(path, rule, value) for every rule of every schema node present in `value`."""
    for rule in node.get("x-kubernetes-validations", ()):
        yield path, rule, value
    if node.get("type") == "object" and isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                yield from rules_on(child, value[name], f"{path}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                yield from rules_on(extra, item, f"{path}.{name}")
    if node.get("type") == "array" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from rules_on(node["items"], item, f"{path}[{index}]")


def all_rules(node: dict) -> list[dict]:
    found = list(node.get("x-kubernetes-validations", ()))
    for child in node.get("properties", {}).values():
        found += all_rules(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += all_rules(node[key])
    return found


def admit(body: dict) -> dict:
    """The stored object: `body` defaulted, or Refused naming the first problem."""
    body = {**body, "spec": apply_defaults(crd.SPEC, body.get("spec"))}
    errors = sorted(VALIDATOR.iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise Refused(path.lstrip("."), error.message)
    for path, rule, value in rules_on(crd.ROOT, body):
        if not holds(rule["rule"], value):
            raise Refused(path.removeprefix("root.").removeprefix("root"), rule["message"])
    return body
