"""An EmbeddingService object as the builders read it: its spec with the CRD's defaults filled.

Owns `Service` and `parse`. Validation is the API server's (the CRD's schema and CEL rules), so
nothing here checks a spec again; defaults are filled from the same schema the API server
defaults from, so a spec stored without them (by an API server that skips defaulting, or before
a field existed) reads the same. Knows nothing about manifests or the Kubernetes API.
"""

import copy
import dataclasses
from typing import Any, Mapping

from hedgerow.operator import crd


@dataclasses.dataclass(frozen=True)
class Service:
    """One EmbeddingService, its spec defaulted.

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
    def gateways_autoscaled(self) -> bool:
        """spec.gateway.autoscaling: an HPA on CPU owns the gateway replica count."""
        return bool(self.spec["gateway"]["autoscaling"]["enabled"])

    @property
    def keda(self) -> bool:
        """Autoscaling is KEDA's (a ScaledObject) rather than an HPA the operator writes."""
        return self.spec["autoscaling"]["engine"] == "keda"

    @property
    def model_label(self) -> str:
        """What status.model shows: the Hugging Face id (at the revision asked for, for a
        model the operator fetches), else the path."""
        model = self.spec["model"]
        if "huggingFace" in model:
            return f"{model['huggingFace']['id']}@{model['huggingFace']['revision']}"
        return model.get("huggingFaceId") or model["path"]


def apply_defaults(node: Mapping[str, Any], value: Any) -> Any:
    """`value` with missing fields filled from the schema `node`, recursively, as the API server
    does: a default applies where its field is absent, and inside objects that exist or were
    themselves defaulted. Returns a new value."""
    if node.get("type") == "object" and isinstance(value, dict):
        out = dict(value)
        for name, child in node.get("properties", {}).items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = apply_defaults(child, out[name])
        return out
    if node.get("type") == "array" and isinstance(value, list):
        return [apply_defaults(node["items"], item) for item in value]
    return value


def parse(body: Mapping[str, Any]) -> Service:
    """A `Service` from a whole EmbeddingService object, as the API server admitted it."""
    metadata = body["metadata"]
    return Service(
        name=metadata["name"],
        namespace=metadata.get("namespace") or "default",
        uid=metadata.get("uid", ""),
        generation=metadata.get("generation"),
        spec=apply_defaults(crd.SPEC, body["spec"]),
    )
