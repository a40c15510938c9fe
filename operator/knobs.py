"""Which process settings an EmbeddingService exposes, under which names, and their values.

Owns the mapping from CRD fields (`spec.server.maxBatchTokens`) to the settings the server and
gateway declare (`max_batch_tokens` of hedgerow.server_settings.ServerSettings). The schema of
each such field (type, default, bounds, description) is generated from the setting's one
definition, and so is the pod's HEDGEROW_* variable for it; its default is the process's own,
so a pod that sets nothing starts as the process would (no setting needs another default on
Kubernetes today; one that did would say so here, with its reason). Knows nothing about
manifests or the Kubernetes API.
"""

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gpu_settings import GpuSettings
from hedgerow.graph_grid import format_shape, parse_shape
from hedgerow.operator.schema import Node
from hedgerow.server_settings import ServerSettings


@dataclasses.dataclass(frozen=True)
class Knob:
    """CRD field `path` (dotted, under spec.server, spec.gateway or spec.model) is setting `name` of
    `owner`. `shapes`: a list of SEQSxTOKENS strings, which the CRD spells as objects."""

    path: str
    owner: type
    name: str
    shapes: bool = False

    @property
    def field(self) -> settings.Field:
        return settings.field_of(self.owner, self.name)


SERVER = (
    Knob("dtype", ServerSettings, "dtype"),
    Knob("maxBatchTokens", ServerSettings, "max_batch_tokens"),
    Knob("maxBatchSeqs", ServerSettings, "max_batch_seqs"),
    Knob("maxRequestTokens", ServerSettings, "max_request_tokens"),
    Knob("maxInflightTokens", ServerSettings, "max_inflight_tokens"),
    Knob("shutdownGraceSeconds", ServerSettings, "shutdown_grace"),
    Knob("hostCpu", ServerSettings, "host_cpu"),
    Knob("probeIntervalSeconds", ServerSettings, "probe_interval"),
    Knob("probeMinCosine", ServerSettings, "probe_min_cosine"),
    Knob("attentionBackend", GpuSettings, "attention_backend"),
    Knob("compile", GpuSettings, "compile"),
    Knob("compileMode", GpuSettings, "compile_mode"),
    Knob("geluEpilogue", GpuSettings, "gelu_epilogue"),
    Knob("quackMlp", GpuSettings, "quack_mlp"),
    Knob("graphs.enabled", GpuSettings, "graphs"),
    Knob("graphs.maxTokens", GpuSettings, "graph_max_tokens"),
    Knob("graphs.maxSeqs", GpuSettings, "graph_max_seqs"),
    Knob("graphs.seqBuckets", GpuSettings, "graph_seq_buckets"),
    Knob("graphs.hotSet", GpuSettings, "graph_hot_set", shapes=True),
    Knob("graphs.memoryLimitMiB", GpuSettings, "graph_memory_limit_mib"),
    Knob("logFormat", ServerSettings, "log_format"),
    Knob("otlpEndpoint", ServerSettings, "otlp_endpoint"),
)

# spec.model's: the task the servers serve (left out: the checkpoint's, the server's `auto`).
MODEL = (
    Knob("task", ServerSettings, "task"),
)

GATEWAY = (
    Knob("chunkTokens", GatewaySettings, "chunk_tokens"),
    Knob("maxInputs", GatewaySettings, "max_inputs"),
    Knob("maxRequestTokens", GatewaySettings, "max_request_tokens"),
    Knob("truncate", GatewaySettings, "truncate"),
    Knob("templates.query", GatewaySettings, "query_template"),
    Knob("templates.document", GatewaySettings, "document_template"),
    Knob("modelAliases", GatewaySettings, "served_model_aliases"),
    Knob("acceptTokenIds", GatewaySettings, "accept_token_ids"),
    Knob("allowTruncatedDimensions", GatewaySettings, "allow_truncated_dimensions"),
    Knob("accessLogSample", GatewaySettings, "access_log_sample"),
    Knob("ejectAfterFailures", GatewaySettings, "eject_after_failures"),
    Knob("logFormat", GatewaySettings, "log_format"),
    Knob("otlpEndpoint", GatewaySettings, "otlp_endpoint"),
)

_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}


def to_crd(knob: Knob, value: Any) -> Any:
    """A settings value as the CRD spells it."""
    if knob.shapes:
        return [dict(zip(("sequences", "tokens"), parse_shape(entry))) for entry in value]
    return list(value) if isinstance(value, tuple) else value


def env_value(knob: Knob, value: Any) -> str:
    """A CRD value as the process's HEDGEROW_* variable spells it."""
    if knob.shapes:
        return ",".join(format_shape(shape["sequences"], shape["tokens"]) for shape in value)
    return settings.env_value(tuple(value) if isinstance(value, list) else value)


def _description(knob: Knob, knobs: tuple[Knob, ...]) -> str:
    """The setting's help, with the flags of sibling knobs named as CRD fields."""
    fields = {settings.flag_name(k.name): k.path for k in knobs}
    return re.sub(r"--[a-z-]+", lambda m: fields.get(m.group(0), m.group(0)),
                  settings.help_text(knob.field, choices=False))


def _bounds(field: settings.Field) -> Node:
    return {key: value for key, value in (("minimum", field.minimum),
                                          ("maximum", field.maximum)) if value is not None}


def _shape_items() -> Node:
    """A hot-set shape; its bounds are the grid's (a shape never exceeds the grid)."""
    seqs = settings.field_of(GpuSettings, "graph_max_seqs")
    tokens = settings.field_of(GpuSettings, "graph_max_tokens")
    return {"type": "object", "required": ["sequences", "tokens"], "properties": {
        "sequences": {"type": "integer", "description": "Sequence count of the shape.",
                      "minimum": 1, "maximum": seqs.maximum},
        "tokens": {"type": "integer", "description": "Token count of the shape (rounded up to "
                   "its bucket).", "minimum": 1, "maximum": tokens.maximum}}}


def schema(knob: Knob, knobs: tuple[Knob, ...]) -> Node:
    """The CRD schema node of `knob`, from its setting's one definition."""
    field = knob.field
    if field.kind is tuple:
        items = _shape_items() if knob.shapes else {"type": _TYPES[field.item_kind],
                                                    **_bounds(field)}
        node: Node = {"type": "array", "description": _description(knob, knobs),
                      "items": items, "maxItems": field.max_items}
    else:
        node = {"type": _TYPES[field.kind], "description": _description(knob, knobs),
                **_bounds(field)}
        if field.choices:
            node["enum"] = list(field.choices)
        if field.pattern:
            node["pattern"] = f"^(?:{field.pattern})$"
    if field.default is not None:
        node["default"] = to_crd(knob, field.default)
    return node


def properties(knobs: tuple[Knob, ...], under: str = "") -> dict[str, Node]:
    """Schema nodes of the knobs directly under `under` ("" or "graphs"), by field name."""
    prefix = f"{under}." if under else ""
    return {knob.path[len(prefix):]: schema(knob, knobs) for knob in knobs
            if knob.path.startswith(prefix) and "." not in knob.path[len(prefix):]}


def env(knobs: tuple[Knob, ...], spec: Mapping[str, Any]) -> dict[str, str]:
    """HEDGEROW_* variables of every knob present in `spec` (spec.server or spec.gateway,
    defaulted); a knob left unset (an optional setting without default) is left out."""
    out = {}
    for knob in knobs:
        value: Any = spec
        for part in knob.path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            out[knob.field.env] = env_value(knob, value)
    return out
