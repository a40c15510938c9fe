"""Turn an EmbeddingService object into a checked, defaulted `Service` the builders read.

Owns the operator's own check of a spec: the CRD's defaults are applied, the spec is validated
against the CRD schema (unknown fields rejected) and every cross-field Rule's Python predicate
runs. The API server does the same with OpenAPI and CEL, so on a healthy cluster this only
repeats it; it matters for objects stored before a rule existed and for API servers that skip
validation. A failure is a `SpecError` with a reason and a message for the user, which the
handlers turn into `Ready=False`; it never reaches kopf as a crash. It knows nothing about
manifests or the Kubernetes API.
"""

import dataclasses
import functools
from typing import Any, Mapping

import jsonschema

from hedgerow.operator import crd
from hedgerow.operator.schema import apply_defaults, render, rule_failures, strict_json_schema


class SpecError(Exception):
    """The resource cannot be reconciled as written; `reason` is one CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class Service:
    """One EmbeddingService, its spec defaulted and checked.

    `spec` keeps the CRD's camelCase keys (`spec["server"]["maxBatchTokens"]`).
    """

    name: str
    namespace: str
    uid: str
    generation: int | None
    spec: Mapping[str, Any]

    @property
    def autoscaled(self) -> bool:
        return bool(self.spec["autoscaling"]["enabled"])

    @property
    def model_label(self) -> str:
        model = self.spec["model"]
        return model.get("huggingFaceId") or model["path"]


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = strict_json_schema(render(crd.SPEC))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def _location(error: jsonschema.ValidationError) -> str:
    path = "spec"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def check_spec(spec: Any) -> dict:
    """Defaulted copy of `spec`; raises SpecError naming the first problem found."""
    if not isinstance(spec, dict):
        raise SpecError("InvalidSpec", "spec must be an object")
    defaulted = apply_defaults(crd.SPEC, spec)
    errors = sorted(_validator().iter_errors(defaulted), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        raise SpecError("InvalidSpec", f"{_location(error)}: {error.message}")
    for path, rule in rule_failures(crd.SPEC, defaulted):
        raise SpecError(rule.reason, f"{path}: {rule.message}")
    return defaulted


def parse(body: Mapping[str, Any]) -> Service:
    """A `Service` from a whole EmbeddingService object; raises SpecError when unusable."""
    metadata = body.get("metadata", {})
    for _, rule in rule_failures(crd.ROOT, {"metadata": metadata}):
        raise SpecError(rule.reason, rule.message)
    spec = check_spec(body.get("spec"))
    return Service(
        name=metadata["name"],
        namespace=metadata.get("namespace") or "default",
        uid=metadata.get("uid", ""),
        generation=metadata.get("generation"),
        spec=spec,
    )
