"""The EmbeddingService CRD: the one source of truth for its schema, defaults and rules.

Owns the `hedgerow.dev/v1alpha1` EmbeddingService API: every spec field with its type, bounds,
default and description; the cross-field rules (rendered as CEL for the API server and checked
again in Python by the operator); the status shape; printer columns. `build_crd()` renders the
CustomResourceDefinition manifest the chart ships; `python -P -m hedgerow.operator.crd --write
charts/hedgerow/crds` writes it, and tests/operator/test_crd.py fails when the chart's copy is
stale. It knows nothing about how a spec becomes Deployments (see build_*.py).
"""

import argparse
import re
import sys
from pathlib import Path

import yaml

from hedgerow.operator.schema import (
    Rule, array, boolean, integer, obj, quantity, render, string, string_map,
)

GROUP = "hedgerow.dev"
VERSION = "v1alpha1"
PLURAL = "embeddingservices"
SINGULAR = "embeddingservice"
KIND = "EmbeddingService"
SHORT_NAMES = ("embsvc",)
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = "embeddingservices.hedgerow.dev.yaml"

# Child names append at most "-gateway" (8 characters) and Service names are DNS-1035 labels of
# at most 63 characters; pods add a 16-character suffix to the Deployment name's ReplicaSet.
MAX_NAME_LENGTH = 40

MAX_BUCKETS = 64
MAX_HOT_SET = 64


def _tolerations(component: str) -> dict:
    item = obj(
        {
            "key": string("Taint key the toleration matches; empty with Exists matches all.",
                          max_length=253, pattern=f"^$|{QUALIFIED_NAME}"),
            "operator": string("Exists or Equal.", enum=("Exists", "Equal"), default="Equal"),
            "value": string("Taint value to match with Equal.", max_length=63,
                            pattern=LABEL_VALUE),
            "effect": string("Taint effect to match; empty matches all.",
                             enum=("NoSchedule", "PreferNoSchedule", "NoExecute")),
            "tolerationSeconds": integer("With NoExecute, how long the pod stays bound.",
                                         minimum=0),
        },
        "A pod toleration (the core/v1 Toleration fields).",
        rules=(
            Rule("(has(self.key) && self.key != '') || self.operator == 'Exists'",
                 "a toleration without a key must use operator Exists",
                 lambda t: bool(t.get("key")) or t.get("operator") == "Exists",
                 reason="InvalidToleration"),
            Rule("self.operator != 'Exists' || !has(self.value) || self.value == ''",
                 "a toleration with operator Exists takes no value",
                 lambda t: t.get("operator") != "Exists" or not t.get("value"),
                 reason="InvalidToleration"),
            Rule("!has(self.tolerationSeconds) || (has(self.effect) && "
                 "self.effect == 'NoExecute')",
                 "tolerationSeconds applies only with effect NoExecute",
                 lambda t: "tolerationSeconds" not in t or t.get("effect") == "NoExecute",
                 reason="InvalidToleration"),
        ),
    )
    return array(item, f"Tolerations of the {component} pods (e.g. for GPU node taints).",
                 max_items=32)


def _on_token_grid(tokens: int) -> bool:
    return tokens % 64 == 0 if tokens <= 1024 else (tokens - 1024) % 256 == 0


def _strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:]))


def _hot_set_fits(graphs: dict) -> bool:
    return all(shape["tokens"] <= graphs["maxTokens"] and shape["sequences"] <= graphs["maxSeqs"]
               for shape in graphs.get("hotSet", []))


SEQ_BUCKETS = array(
    integer("A sequence-count bucket.", minimum=1, maximum=4096),
    "Sequence-count buckets of the graph grid: strictly increasing, the last equal to "
    "maxSeqs. Empty: powers of two up to maxSeqs, then maxSeqs.",
    max_items=MAX_BUCKETS,
    rules=(
        Rule("self.isSorted() && self.all(b, self.exists_one(c, c == b))",
             "graphs.seqBuckets must be strictly increasing (sorted, no duplicates)",
             _strictly_increasing, reason="InvalidBucketGrid"),
    ),
)

HOT_SET = array(
    obj(
        {
            "sequences": integer("Sequence count of the configuration.", minimum=1,
                                 maximum=4096),
            "tokens": integer("Token count of the configuration (rounded up to its bucket).",
                              minimum=1, maximum=1048576),
        },
        "One CUDA-graph configuration (sequences, tokens).",
        required=("sequences", "tokens"),
        rules=(Rule("self.sequences <= self.tokens",
                    "a hot-set shape cannot hold more sequences than tokens",
                    lambda s: s["sequences"] <= s["tokens"], reason="InvalidHotSet"),),
    ),
    "Configurations captured before the server reports warm; everything else is captured "
    "lazily while serving. Each costs a capture (tens of ms) and graph memory. Empty: 1x64, "
    "1x128, 1x256, 1x512 (those within maxTokens).",
    max_items=MAX_HOT_SET,
)

GRAPHS = obj(
    {
        "enabled": boolean("Capture CUDA graphs (off: every step runs eagerly, slower at "
                           "small batches).", default=True),
        "maxTokens": integer("Largest token bucket with a graph; bigger batches run eagerly. "
                             "Token buckets are multiples of 64 up to 1024, then of 256.",
                             default=8192, minimum=64, maximum=1048576),
        "maxSeqs": integer("Most sequences in a batch that runs in a graph.", default=64,
                           minimum=1, maximum=4096),
        "seqBuckets": SEQ_BUCKETS,
        "hotSet": HOT_SET,
        "memoryLimitMiB": integer("Most device memory graphs and their buffers may hold; past "
                                  "it, configurations stay eager.", default=8192, minimum=0,
                                  maximum=1048576),
    },
    "The CUDA-graph grid: token buckets up to maxTokens times sequence buckets.",
    default={},
    rules=(
        Rule("self.maxTokens <= 1024 ? self.maxTokens % 64 == 0 : "
             "(self.maxTokens - 1024) % 256 == 0",
             "graphs.maxTokens must lie on the token grid: a multiple of 64 up to 1024, then "
             "1024 plus a multiple of 256", lambda g: _on_token_grid(g["maxTokens"]),
             reason="InvalidBucketGrid"),
        Rule("!has(self.seqBuckets) || size(self.seqBuckets) == 0 || "
             "self.seqBuckets[size(self.seqBuckets) - 1] == self.maxSeqs",
             "the last of graphs.seqBuckets must equal graphs.maxSeqs",
             lambda g: not g.get("seqBuckets") or g["seqBuckets"][-1] == g["maxSeqs"],
             reason="InvalidBucketGrid"),
        Rule("!has(self.hotSet) || self.hotSet.all(h, h.tokens <= self.maxTokens && "
             "h.sequences <= self.maxSeqs)",
             "every graphs.hotSet shape must fit within graphs.maxTokens and graphs.maxSeqs",
             _hot_set_fits, reason="InvalidHotSet"),
    ),
)

# Paths the builders mount in every pod (build_common, build_server, build_gateway): the model
# volume must not land on one of them.
RESERVED_MOUNT_PATHS = ("/tmp", "/dev/shm", "/etc/hedgerow/api-keys")
# An extended resource name (domain/name), so never cpu, memory or a bare word.
EXTENDED_RESOURCE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# What the API server checks on the children (names of Secrets, PVCs, PriorityClasses; label
# and taint keys and values): checked here so such a spec is refused on apply.
# No backslashes: these also sit inside CEL string literals, where cel-go refuses "\.".
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
# Children are named <name>, <name>-server and <name>-gateway: a resource named like another's
# child would write that child.
CHILD_SUFFIXES = ("-server", "-gateway")


def node_selector(component: str) -> dict:
    return string_map(
        f"Node labels a {component} pod must match.", max_value_length=63,
        value_pattern=LABEL_VALUE,
        rules=(Rule(f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
                    "nodeSelector keys must be label keys: an optional DNS-subdomain prefix "
                    "and '/', then at most 63 letters, digits, '-', '_' or '.', starting and "
                    "ending with a letter or digit",
                    lambda selector: all(re.fullmatch(QUALIFIED_NAME, key) for key in selector),
                    reason="InvalidNodeSelector"),))


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _escapes(key: str, volume: dict) -> bool:
    path = volume.get(key)
    return path is not None and (path.startswith("/") or ".." in path.split("/"))


MODEL = obj(
    {
        "path": string("Model directory inside the containers (config.json, safetensors, "
                       "tokenizer.json).", pattern=r"^/", max_length=1024),
        "huggingFaceId": string("The model's Hugging Face id, for reference only (shown by "
                                "`kubectl get embsvc`); nothing is downloaded.",
                                max_length=256),
        "servedName": string("The `model` name clients send. Default: the resource name.",
                             pattern=r"^\S+$", max_length=256),
        "mountPath": string("Where the model volume is mounted when one is given.",
                            default="/models", pattern=r"^/", max_length=1024),
        "persistentVolumeClaim": obj(
            {
                "claimName": string("Name of the PersistentVolumeClaim holding the model.",
                                    min_length=1, max_length=253, pattern=DNS_SUBDOMAIN),
                "subPath": string("Sub-directory of the volume to mount.", max_length=1024),
            },
            "Mount the model from a PVC (read-only). Gateways mount it too, for the "
            "tokenizer: use ReadOnlyMany when pods span nodes.",
            required=("claimName",),
        ),
        "hostPath": obj(
            {"path": string("Directory on the node.", pattern=r"^/", max_length=1024)},
            "Mount the model from a directory on the node (read-only).",
            required=("path",),
        ),
    },
    "Where the model lives. With neither persistentVolumeClaim nor hostPath, `path` is baked "
    "into the server and gateway images.",
    required=("path",),
    rules=(
        Rule("!(has(self.persistentVolumeClaim) && has(self.hostPath))",
             "give at most one of model.persistentVolumeClaim and model.hostPath",
             lambda m: not ("persistentVolumeClaim" in m and "hostPath" in m),
             reason="InvalidModelSource"),
        Rule("!(self.mountPath in " + _cel_list(RESERVED_MOUNT_PATHS) + ")",
             "model.mountPath must not be one of the paths the pods mount already: "
             + ", ".join(RESERVED_MOUNT_PATHS),
             lambda m: m["mountPath"] not in RESERVED_MOUNT_PATHS,
             reason="InvalidModelPath"),
        Rule("!has(self.persistentVolumeClaim) || !has(self.persistentVolumeClaim.subPath) || "
             "!(self.persistentVolumeClaim.subPath.startsWith('/') || "
             "self.persistentVolumeClaim.subPath.matches('(^|/)[.][.](/|$)'))",
             "model.persistentVolumeClaim.subPath must be a relative path without '..'",
             lambda m: not _escapes("subPath", m.get("persistentVolumeClaim") or {}),
             reason="InvalidModelPath"),
        Rule("!(has(self.persistentVolumeClaim) || has(self.hostPath)) || "
             "self.path == self.mountPath || self.path.startsWith(self.mountPath + '/')",
             "model.path must lie under model.mountPath when the model comes from a volume",
             lambda m: not ("persistentVolumeClaim" in m or "hostPath" in m)
             or m["path"] == m["mountPath"] or m["path"].startswith(m["mountPath"] + "/"),
             reason="InvalidModelPath"),
    ),
)

SERVER = obj(
    {
        "image": string("Server image (runs `hedgerow server`).", min_length=1,
                        max_length=1024),
        "imagePullPolicy": string("Image pull policy.", enum=("Always", "IfNotPresent", "Never"),
                                  default="IfNotPresent"),
        "replicas": integer("Server replicas when autoscaling is off (one GPU each).",
                            default=1, minimum=0, maximum=1000),
        "gpus": integer("GPUs per server pod: 1, or 0 to run on CPU (a server drives one "
                        "GPU; scale with replicas).", default=1, minimum=0, maximum=1),
        "gpuResource": string("Extended resource name of a GPU (domain/name).",
                              default="nvidia.com/gpu", pattern=EXTENDED_RESOURCE,
                              max_length=253),
        "cpu": quantity("CPU request of a server pod.", default="4"),
        "memory": quantity("Memory request and limit of a server pod.", default="32Gi"),
        "dtype": string("Engine compute dtype.", enum=("bfloat16", "float16", "float32"),
                        default="bfloat16"),
        "maxBatchTokens": integer("Token budget of one engine step.", default=16384,
                                  minimum=1, maximum=1048576),
        "maxBatchSeqs": integer("Most sequences in one engine step.", default=256, minimum=1,
                                maximum=4096),
        "maxRequestTokens": integer("Most tokens one gRPC Embed request may carry.",
                                    default=16384, minimum=1, maximum=4194304),
        "maxInflightTokens": integer("Admission bound: tokens accepted but not answered.",
                                     default=65536, minimum=1, maximum=16777216),
        "graphs": GRAPHS,
        "attentionBackend": string("CUDA ragged attention backend; auto picks per "
                                   "configuration.", enum=("auto", "varlen", "flash_attn", "sdpa"),
                                   default="auto"),
        "compile": boolean("torch.compile the forward pass before graph capture (tens of "
                           "seconds at start).", default=False),
        "nodeSelector": node_selector("server"),
        "tolerations": _tolerations("server"),
        "priorityClassName": string("PriorityClass of the server pods.", max_length=253,
                                    pattern=DNS_SUBDOMAIN),
        "maxUnavailable": integer("PodDisruptionBudget: server pods that may be evicted at "
                                  "once.", default=1, minimum=0, maximum=1000),
        "shutdownGraceSeconds": integer("On SIGTERM, how long a server keeps finishing admitted "
                                        "work.", default=30, minimum=0, maximum=3600),
        "drainSeconds": integer("preStop pause before SIGTERM, so gateways see the pod leave "
                                "the Service first.", default=5, minimum=0, maximum=300),
        "startupSeconds": integer("How long a server may take to load the model and start "
                                  "gRPC before it is restarted.", default=900, minimum=10,
                                  maximum=7200),
    },
    "The gRPC embedding servers (one per GPU).",
    required=("image",),
    rules=(
        Rule("self.maxRequestTokens <= self.maxInflightTokens",
             "server.maxRequestTokens must not exceed server.maxInflightTokens",
             lambda s: s["maxRequestTokens"] <= s["maxInflightTokens"],
             reason="InvalidServerLimits"),
    ),
)

GATEWAY = obj(
    {
        "image": string("Gateway image (runs `hedgerow gateway`; no torch).", min_length=1,
                        max_length=1024),
        "imagePullPolicy": string("Image pull policy.", enum=("Always", "IfNotPresent", "Never"),
                                  default="IfNotPresent"),
        "replicas": integer("Gateway replicas.", default=2, minimum=1, maximum=1000),
        "cpu": quantity("CPU request of a gateway pod.", default="2"),
        "memory": quantity("Memory request and limit of a gateway pod.", default="2Gi"),
        "chunkTokens": integer("Token budget of one chunk sent to one server.", default=2048,
                               minimum=1, maximum=1048576),
        "maxInputs": integer("Most inputs in one request.", default=2048, minimum=1,
                             maximum=1000000),
        "maxRequestTokens": integer("Most tokens in one request, after templates.",
                                    default=300000, minimum=1, maximum=100000000),
        "truncate": boolean("Truncate over-long inputs instead of answering 400.",
                            default=False),
        "templates": obj(
            {
                "query": string('Prefix for input_type=query; "" for none.',
                                max_length=4096),
                "document": string('Prefix for input_type=document; "" for none.',
                                   max_length=4096),
            },
            "Prefixes per input type. Default: the model's own prompts.",
        ),
        "apiKeySecret": obj(
            {
                "name": string("Secret name.", min_length=1, max_length=253,
                               pattern=DNS_SUBDOMAIN),
                "key": string("Key holding the API keys, one per line.", default="api-keys",
                              min_length=1, max_length=253, pattern=SECRET_KEY),
            },
            "Secret with the accepted API keys. Without it the API is open.",
            required=("name",),
        ),
        "serviceType": string("Type of the gateway Service.",
                              enum=("ClusterIP", "NodePort", "LoadBalancer"),
                              default="ClusterIP"),
        "nodeSelector": node_selector("gateway"),
        "tolerations": _tolerations("gateway"),
    },
    "The HTTP gateways: tokenize, chunk, route to servers, merge.",
    required=("image",),
)

AUTOSCALING = obj(
    {
        "enabled": boolean("Scale servers with an HPA on token throughput; `server.replicas` "
                           "is then ignored.", default=False),
        "minReplicas": integer("Fewest server replicas.", default=1, minimum=1, maximum=1000),
        "maxReplicas": integer("Most server replicas.", default=4, minimum=1, maximum=1000),
        "targetTokensPerSecond": integer("Tokens per second one server replica should carry; "
                                         "replicas = total token rate / this.", default=100000,
                                         minimum=1, maximum=1000000000),
        "metricName": string("Object metric on the server Service with the total token rate "
                             "(see the chart's prometheus-adapter rule).",
                             default="hedgerow_tokens_per_second", min_length=1,
                             max_length=253),
        "scaleUpStabilizationSeconds": integer("HPA scale-up stabilization window.",
                                               default=0, minimum=0, maximum=3600),
        "scaleDownStabilizationSeconds": integer("HPA scale-down stabilization window.",
                                                 default=300, minimum=0, maximum=3600),
        "scaleUpPodsPerMinute": integer("Most server pods added per minute.", default=4,
                                        minimum=1, maximum=1000),
        "scaleDownPodsPerMinute": integer("Most server pods removed per minute.", default=1,
                                          minimum=1, maximum=1000),
    },
    "Token-throughput autoscaling of the servers.",
    default={},
    rules=(
        Rule("self.minReplicas <= self.maxReplicas",
             "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
             lambda a: a["minReplicas"] <= a["maxReplicas"], reason="InvalidAutoscaling"),
    ),
)

WARMUP = obj(
    {
        "readinessGate": boolean("Hold a server pod out of traffic until its hot CUDA graphs "
                                 "are captured (pod readiness gate hedgerow.dev/graphs-warm).",
                                 default=True),
    },
    "Warmup tracking.",
    default={},
)

SPEC = obj(
    {
        "model": MODEL,
        "server": SERVER,
        "gateway": GATEWAY,
        "autoscaling": AUTOSCALING,
        "warmup": WARMUP,
    },
    "Desired state of an EmbeddingService.",
    required=("model", "server", "gateway"),
    rules=(
        Rule("self.gateway.chunkTokens <= self.server.maxRequestTokens",
             "gateway.chunkTokens must not exceed server.maxRequestTokens, or chunks would be "
             "refused", lambda s: s["gateway"]["chunkTokens"] <= s["server"]["maxRequestTokens"],
             reason="InvalidChunking"),
    ),
)

CONDITION = obj(
    {
        "type": string("Ready, Progressing or GraphsWarm."),
        "status": string("True, False or Unknown.", enum=("True", "False", "Unknown")),
        "reason": string("One CamelCase word."),
        "message": string("Human-readable detail."),
        "lastTransitionTime": string("When status last changed (RFC 3339)."),
        "observedGeneration": integer("Spec generation this condition describes."),
    },
    "A condition of the EmbeddingService.",
    required=("type", "status"),
)

STATUS = obj(
    {
        "observedGeneration": integer("Last spec generation the operator acted on."),
        "model": string("The model served (Hugging Face id, or the path)."),
        "replicas": integer("Server pods that exist."),
        "readyReplicas": integer("Server pods ready for traffic."),
        "warmReplicas": integer("Server pods whose hot CUDA graphs are captured."),
        "gatewayReadyReplicas": integer("Gateway pods ready for traffic."),
        "conditions": {
            "type": "array", "description": "Ready, Progressing and GraphsWarm.",
            "items": CONDITION,
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
        },
    },
    "Observed state, written by the operator.",
    preserve_unknown=True,
)

ROOT = obj(
    {
        "apiVersion": string("hedgerow.dev/v1alpha1."),
        "kind": string("EmbeddingService."),
        "metadata": {"type": "object"},
        "spec": SPEC,
        "status": STATUS,
    },
    "An embedding model served by Hedgerow: gateways, GPU servers and their autoscaling.",
    required=("spec",),
    rules=(
        Rule(f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
             f"metadata.name must be at most {MAX_NAME_LENGTH} characters (children append "
             "suffixes and Service names are DNS labels)",
             lambda body: len(body.get("metadata", {}).get("name", "")) <= MAX_NAME_LENGTH,
             reason="NameTooLong"),
        Rule(f"self.metadata.name.matches('{DNS_LABEL}')",
             "metadata.name must be a DNS label: lowercase letters, digits and '-', starting "
             "with a letter and ending with a letter or digit (it names Services)",
             lambda body: re.fullmatch(DNS_LABEL, body.get("metadata", {}).get("name", "a"))
             is not None,
             reason="InvalidName"),
        Rule(" && ".join(f"!self.metadata.name.endsWith('{suffix}')" for suffix in CHILD_SUFFIXES),
             "metadata.name must not end in " + " or ".join(CHILD_SUFFIXES) + ": the children "
             "of another EmbeddingService are named that way",
             lambda body: not body.get("metadata", {}).get("name", "").endswith(CHILD_SUFFIXES),
             reason="InvalidName"),
    ),
)

PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".status.model"},
    {"name": "Ready", "type": "string",
     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
    {"name": "Warm", "type": "integer", "jsonPath": ".status.warmReplicas"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def open_api_schema() -> dict:
    """The rendered openAPIV3Schema of v1alpha1 (structural, CEL rules included)."""
    return render(ROOT)


def build_crd() -> dict:
    """The CustomResourceDefinition manifest (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "hedgerow",
                       "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL, "singular": SINGULAR, "kind": KIND,
                "listKind": f"{KIND}List", "shortNames": list(SHORT_NAMES),
                "categories": ["hedgerow"],
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "schema": {"openAPIV3Schema": open_api_schema()},
            }],
        },
    }


def crd_yaml() -> str:
    header = ("# Generated from operator/crd.py by `python -P -m hedgerow.operator.crd --write "
              "charts/hedgerow/crds`. Do not edit.\n")
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def _rows(node: dict, prefix: str) -> list[str]:
    rows = []
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        kind = child.get("type", "quantity")
        if kind == "array":
            kind = f"list of {child['items'].get('type', 'quantity')}"
        default = child.get("default")
        shown = "" if default in (None, {}) else f"`{default}`"
        rows.append(f"| `{path}` | {kind} | {shown} | {child.get('description', '')} |")
        if child.get("type") == "object" and "properties" in child:
            rows += _rows(child, path)
    return rows


def spec_table() -> str:
    """Markdown table of every spec field (docs/operator.md embeds it; a test keeps it current)."""
    head = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    return "\n".join(head + _rows(SPEC, "spec")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print or write the EmbeddingService CRD.")
    parser.add_argument("--write", type=Path, metavar="DIR",
                        help=f"write {CRD_FILE} into DIR instead of printing it")
    parser.add_argument("--spec-table", action="store_true",
                        help="print the Markdown table of spec fields instead")
    args = parser.parse_args(argv)
    if args.spec_table:
        sys.stdout.write(spec_table())
        return 0
    text = crd_yaml()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / CRD_FILE).write_text(text)
        print(f"wrote {args.write / CRD_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
