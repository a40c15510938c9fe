"""Small builders for OpenAPI v3 schema nodes, and the cross-field rules that travel with them.

Owns the vocabulary the CRD is written in: typed nodes (`integer`, `string`, `obj`, ...) that
render to a Kubernetes *structural* schema, and `Rule`, which pairs a CEL expression (enforced by
the API server as `x-kubernetes-validations`) with the same predicate in Python (enforced by the
operator, for API servers that skip CEL and for objects stored before a rule existed).

It also walks a schema over an object: `apply_defaults` fills defaults the way the API server
does, `rule_failures` evaluates every Rule's Python predicate, and `strict_json_schema` turns the
structural schema into a plain JSON Schema that rejects unknown fields (what `kubectl apply`
with strict field validation does). It knows nothing about EmbeddingServices.
"""

import copy
import dataclasses
from typing import Any, Callable, Mapping

Node = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Rule:
    """A cross-field constraint on an object node.

    `cel` is evaluated by the API server with `self` bound to the node; `check(node) -> bool`
    is the same predicate in Python over the defaulted node. `message` says what to change.
    """

    cel: str
    message: str
    check: Callable[[Mapping[str, Any]], bool]
    reason: str = "InvalidSpec"


# Rules ride on the node they belong to under this private key; `render` turns them into CEL
# and drops the key, `rule_failures` runs their Python predicates.
_RULES = "_rules"


def _node(kind: str, description: str, **extra: Any) -> Node:
    node: Node = {"type": kind, "description": description}
    node.update({k: v for k, v in extra.items() if v is not None})
    return node


def integer(description: str, *, default: int | None = None, minimum: int | None = None,
            maximum: int | None = None) -> Node:
    return _node("integer", description, default=default, minimum=minimum, maximum=maximum)


def string(description: str, *, default: str | None = None, enum: tuple[str, ...] | None = None,
           pattern: str | None = None, max_length: int | None = None,
           min_length: int | None = None) -> Node:
    return _node("string", description, default=default,
                 enum=list(enum) if enum else None, pattern=pattern,
                 maxLength=max_length, minLength=min_length)


def boolean(description: str, *, default: bool | None = None) -> Node:
    return _node("boolean", description, default=default)


def quantity(description: str, *, default: str | None = None) -> Node:
    """A non-negative Kubernetes resource quantity ("4", "500m", "32Gi")."""
    node: Node = {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0,  # numbers only; the pattern below refuses a negative string
        "pattern": r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                   r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        "x-kubernetes-int-or-string": True,
    }
    if default is not None:
        node["default"] = default
    return node


def string_map(description: str, *, max_properties: int = 64,
               max_value_length: int = 4096, value_pattern: str | None = None,
               rules: tuple[Rule, ...] = ()) -> Node:
    values: Node = {"type": "string", "maxLength": max_value_length}
    if value_pattern is not None:
        values["pattern"] = value_pattern
    node: Node = {"type": "object", "description": description, "additionalProperties": values,
                  "maxProperties": max_properties}
    if rules:
        node[_RULES] = rules
    return node


def array(items: Node, description: str, *, max_items: int, min_items: int | None = None,
          default: list | None = None, rules: tuple[Rule, ...] = ()) -> Node:
    node = _node("array", description, items=items, maxItems=max_items, minItems=min_items,
                 default=default)
    if rules:
        node[_RULES] = rules
    return node


def obj(properties: dict[str, Node], description: str, *, required: tuple[str, ...] = (),
        default: dict | None = None, rules: tuple[Rule, ...] = (),
        preserve_unknown: bool = False) -> Node:
    node = _node("object", description, properties=properties,
                 required=list(required) or None, default=default)
    if preserve_unknown:
        node["x-kubernetes-preserve-unknown-fields"] = True
    if rules:
        node[_RULES] = rules
    return node


def render(node: Node) -> Node:
    """A deep copy of `node` with every Rule rendered as `x-kubernetes-validations`."""
    out = {}
    for key, value in node.items():
        if key == _RULES:
            continue
        if key == "properties":
            out[key] = {name: render(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = render(value)
        else:
            out[key] = copy.deepcopy(value)
    rules = node.get(_RULES, ())
    if rules:
        out["x-kubernetes-validations"] = [
            {"rule": rule.cel, "message": rule.message, "reason": "FieldValueInvalid"}
            for rule in rules
        ]
    return out


def apply_defaults(node: Node, value: Any) -> Any:
    """Fill missing fields with their schema defaults, recursively (API-server semantics:
    a default applies where the field is absent; defaults of nested objects apply inside
    objects that exist or were themselves defaulted). Returns a new value."""
    if node.get("type") == "object" and isinstance(value, dict):
        out = dict(value)
        for name, child in node.get("properties", {}).items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = apply_defaults(child, out[name])
        return out
    if node.get("type") == "array" and isinstance(value, list) and "items" in node:
        return [apply_defaults(node["items"], item) for item in value]
    return value


def rule_failures(node: Node, value: Any, path: str = "spec") -> list[tuple[str, Rule]]:
    """Every Rule whose Python predicate is false on `value` (already defaulted and
    schema-valid), with the path of the node it failed on."""
    failures = []
    if node.get("type") == "object" and isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                failures += rule_failures(child, value[name], f"{path}.{name}")
    if node.get("type") == "array" and isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            failures += rule_failures(node["items"], item, f"{path}[{index}]")
    for rule in node.get(_RULES, ()):
        if not rule.check(value):
            failures.append((path, rule))
    return failures


def strict_json_schema(rendered: Node) -> Node:
    """A JSON Schema (draft 2020-12 compatible) from a rendered structural schema: objects
    with declared properties reject unknown fields, Kubernetes extensions are dropped."""
    out: Node = {}
    for key, value in rendered.items():
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
    if rendered.get("x-kubernetes-int-or-string"):
        # A pattern applies only to strings in JSON Schema, so "4" and 4 both pass.
        out.pop("type", None)
    if (rendered.get("type") == "object" and "properties" in rendered
            and not rendered.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out
