"""The EmbeddingService CRD: its schema, defaults and CEL rules, in one place.

Owns the `hedgerow.dev/v1alpha1` EmbeddingService API: the fields that are the operator's own
(the model, images, resources, scheduling, autoscaling, warmup, the guard of the embedding
space, whose default minimum cosine is hedgerow/golden_set.py's) with their types, bounds,
defaults and descriptions; the process settings it exposes, generated from their one definition
by knobs.py; the cross-field rules, each written once as CEL for the API server (the graph rules
from hedgerow.graph_grid's arithmetic); the status shape; printer columns. `build_crd()`
renders the CustomResourceDefinition the chart ships (generated with `make generate`; a test
fails when the chart's copy is stale). It knows nothing about how a spec becomes Deployments.
"""

import json

import yaml

from hedgerow import fetch_settings, golden_set
from hedgerow.graph_grid import GraphGrid
from hedgerow.operator import gateway_sizing, knobs
from hedgerow.operator.crd_autoscaling import AUTOSCALING, GATEWAY_AUTOSCALING
from hedgerow.operator.crd_network import NETWORK_POLICY, TLS
from hedgerow.operator.crd_pods import pod_template
from hedgerow.operator.patterns import (
    DNS_LABEL, DNS_SUBDOMAIN, EXTENDED_RESOURCE, LABEL_VALUE, PULL_POLICIES, QUALIFIED_NAME,
    SECRET_KEY,
)
from hedgerow.operator.schema import (
    array, boolean, integer, number, obj, quantity, rule, string, string_map,
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
# Children are named <name>, <name>-server and <name>-gateway: a resource named like another's
# child would write that child.
CHILD_SUFFIXES = ("-server", "-gateway")
# Paths the builders mount in every pod (build_common, build_server, build_gateway): the model
# volume must not land on one of them.
RESERVED_MOUNT_PATHS = ("/tmp", "/dev/shm", "/etc/hedgerow/api-keys", "/etc/hedgerow/golden-set",
                        "/var/cache/hedgerow/compile", "/etc/hedgerow/tls")


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
            rule("(has(self.key) && self.key != '') || self.operator == 'Exists'",
                 "a toleration without a key must use operator Exists"),
            rule("self.operator != 'Exists' || !has(self.value) || self.value == ''",
                 "a toleration with operator Exists takes no value"),
            rule("!has(self.tolerationSeconds) || (has(self.effect) && "
                 "self.effect == 'NoExecute')",
                 "tolerationSeconds applies only with effect NoExecute"),
        ),
    )
    return array(item, f"Tolerations of the {component} pods (e.g. for GPU node taints).",
                 max_items=32)


def _node_selector(component: str) -> dict:
    return string_map(
        f"Node labels a {component} pod must match.", max_value_length=63,
        value_pattern=LABEL_VALUE,
        rules=(rule(f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
                    "nodeSelector keys must be label keys: an optional DNS-subdomain prefix "
                    "and '/', then at most 63 letters, digits, '-', '_' or '.', starting and "
                    "ending with a letter or digit"),))


def _graph_rules() -> tuple[dict, ...]:
    """GraphGrid's checks as CEL (hedgerow.graph_grid owns the arithmetic; the tests hold each
    rule to GraphGrid and parse_hot_set on many grids)."""
    grid = GraphGrid()
    small, switch, large = grid.small_step, grid.switch, grid.large_step
    return (
        rule(f"self.maxTokens <= {switch} ? self.maxTokens % {small} == 0 : "
             f"(self.maxTokens - {switch}) % {large} == 0",
             f"graphs.maxTokens must lie on the token grid: a multiple of {small} up to "
             f"{switch}, then {switch} plus a multiple of {large}"),
        rule("size(self.seqBuckets) == 0 || "
             "(self.seqBuckets.isSorted() && self.seqBuckets.all(b, "
             "self.seqBuckets.exists_one(c, c == b)))",
             "graphs.seqBuckets must be strictly increasing (sorted, no duplicates)"),
        rule("size(self.seqBuckets) == 0 || "
             "self.seqBuckets[size(self.seqBuckets) - 1] == self.maxSeqs",
             "the last of graphs.seqBuckets must equal graphs.maxSeqs (the defaults end at "
             f"{grid.max_seqs}: give seqBuckets when you change maxSeqs)"),
        rule("self.hotSet.all(h, h.tokens <= self.maxTokens && h.sequences <= self.maxSeqs "
             "&& h.sequences <= h.tokens)",
             "every graphs.hotSet shape must fit within graphs.maxTokens and graphs.maxSeqs "
             "and hold no more sequences than tokens (the default hot set reaches 1x512: give "
             "hotSet when you lower maxTokens)"),
    )


# ---- spec.model.huggingFace: a model the operator fetches (hedgerow fetch-model) ------------
# The init container's settings are hedgerow/fetch_settings.py's; build_fetch.py builds it.
MOVING_BRANCHES = ("main", "master")  # refused at once; other branches when the pod fetches


def _hugging_face() -> dict:
    return obj(
        {
            "id": string("The model's Hugging Face repository id (org/name).", min_length=1,
                         max_length=193, pattern=f"^{fetch_settings.REPO_ID}$"),
            "revision": string("What to fetch: a commit hash (40 hex digits) or a tag. A "
                               "branch moves, so it needs allowMovingRevision. The commit it "
                               "resolves to is shown in status.model and is one of the facts "
                               "of the embedding space's fingerprint.", min_length=1,
                               max_length=255, pattern=f"^{fetch_settings.REVISION}$"),
            "allowMovingRevision": boolean(
                "Accept a branch as revision: each new pod fetches the branch's commit of the "
                "moment, so replicas may serve different commits (different spaces; the "
                "gateway never mixes two in one answer).", default=False),
            "tokenSecret": obj(
                {
                    "name": string("Secret name.", min_length=1, max_length=253,
                                   pattern=DNS_SUBDOMAIN),
                    "key": string("Key holding the token.", default="token", min_length=1,
                                  max_length=253, pattern=SECRET_KEY),
                },
                "Secret with a Hugging Face access token, for a private or gated model: "
                "given to the download as HF_TOKEN, never logged, never in a ConfigMap.",
                required=("name",),
            ),
            "allowPatterns": array(
                string("An fnmatch pattern over the repository's paths (`*` also matches "
                       "`/`).", min_length=1, max_length=256),
                "Which files to fetch. Default: "
                + ", ".join(fetch_settings.DEFAULT_ALLOW_PATTERNS)
                + " (the config, safetensors weights, tokenizer and sentence-transformers "
                "files). Gateways leave the weights out.", max_items=64,
                rules=(rule("size(self) > 0", "huggingFace.allowPatterns must not be empty "
                            "(leave it out for the default files)"),)),
            "endpoint": string("The hub to fetch from (a mirror, an air-gapped hub), given to "
                               "the download as HF_ENDPOINT. Default: https://huggingface.co.",
                               pattern=r"^https?://[^/\s]+(/\S*)?$", max_length=1024),
            "cache": obj(
                {
                    "claimName": string("A PersistentVolumeClaim to keep fetched models on, "
                                        "shared by every server and gateway pod (ReadWriteMany "
                                        "when pods span nodes): a model is downloaded once "
                                        "and later pods start without a download. Without "
                                        "it each pod downloads into an emptyDir of its own.",
                                        min_length=1, max_length=253, pattern=DNS_SUBDOMAIN),
                    "subPath": string("Sub-directory of the claim to use.", max_length=1024),
                    "sizeLimit": quantity("Size limit of the per-pod emptyDir used without "
                                          "claimName (a model larger than this is refused "
                                          "before its download).", default="20Gi"),
                },
                "Where fetched models are kept.",
                default={},
                rules=(rule("!has(self.subPath) || !(self.subPath.startsWith('/') || "
                            "self.subPath.matches('(^|/)[.][.](/|$)'))",
                            "huggingFace.cache.subPath must be a relative path without "
                            "'..'"),
                       rule("!has(self.subPath) || has(self.claimName)",
                            "huggingFace.cache.subPath needs huggingFace.cache.claimName")),
            ),
        },
        "Fetch the model from the Hugging Face Hub: an init container of every server and "
        "gateway pod (the server image, `hedgerow fetch-model`) downloads it, verifies every "
        "file against the hub's digests and keeps it in the cache; the containers then read "
        "it there.",
        required=("id", "revision"),
        rules=(
            rule("!self.id.contains('--') && !self.id.contains('..') && "
                 "!self.id.endsWith('.git')",
                 "huggingFace.id must not contain '--' or '..' nor end in '.git' (the Hub "
                 "refuses such ids)"),
            rule("!self.revision.contains('..') && !self.revision.endsWith('.lock')",
                 "huggingFace.revision must not contain '..' nor end in '.lock' (not a git "
                 "revision)"),
            rule("self.allowMovingRevision || !(self.revision in ["
                 + ", ".join(f"'{b}'" for b in MOVING_BRANCHES) + "])",
                 "huggingFace.revision names a branch, which moves: give a commit hash or a "
                 "tag, or set huggingFace.allowMovingRevision: true"),
        ),
    )


HUGGING_FACE_RULES = (
    rule("!has(self.huggingFace) || !(has(self.path) || has(self.persistentVolumeClaim) || "
         "has(self.hostPath) || has(self.huggingFaceId))",
         "model.huggingFace cannot be combined with model.path, model.persistentVolumeClaim, "
         "model.hostPath or model.huggingFaceId: the operator fetches the model into its own "
         "cache and chooses the path"),
    rule("has(self.path) || has(self.huggingFace)",
         "give model.path (a model directory in the images or on a volume) or "
         "model.huggingFace (a model the operator fetches)"),
)
# ---- end spec.model.huggingFace ---------------------------------------------------------------


def _model_knobs() -> dict:
    """spec.model's settings (`task`), without the setting's default: left out, the server
    reads the task from the checkpoint, and the pods of a service naming none keep their env."""
    nodes = knobs.properties(knobs.MODEL)
    for node in nodes.values():
        node.pop("default", None)
    return nodes


def _model() -> dict:
    mounted = "has(self.persistentVolumeClaim) || has(self.hostPath)"
    reserved = "[" + ", ".join(f"'{path}'" for path in RESERVED_MOUNT_PATHS) + "]"
    return obj(
        {
            "path": string("Model directory inside the containers (config.json, safetensors, "
                           "tokenizer.json).", pattern=r"^/", max_length=1024),
            "huggingFaceId": string("The model's Hugging Face id, for reference only (shown by "
                                    "`kubectl get embsvc`); nothing is downloaded (that is "
                                    "huggingFace's job).", max_length=256),
            "servedName": string("The `model` name clients send. Default: the resource name.",
                                 pattern=r"^\S+$", max_length=256),
            **_model_knobs(),
            "mountPath": string("Where the model volume is mounted when one is given.",
                                default="/models", pattern=r"^/", max_length=1024),
            "persistentVolumeClaim": obj(
                {
                    "claimName": string("Name of the PersistentVolumeClaim holding the model.",
                                        min_length=1, max_length=253, pattern=DNS_SUBDOMAIN),
                    "subPath": string("Sub-directory of the volume to mount.",
                                      max_length=1024),
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
            "huggingFace": _hugging_face(),
        },
        "Where the model lives: fetched from the Hugging Face Hub (huggingFace), or a "
        "directory at `path` on a volume (persistentVolumeClaim, hostPath) or baked into the "
        "server and gateway images (neither).",
        rules=HUGGING_FACE_RULES + (
            rule("!(has(self.persistentVolumeClaim) && has(self.hostPath))",
                 "give at most one of model.persistentVolumeClaim and model.hostPath"),
            rule(f"!(self.mountPath in {reserved})",
                 "model.mountPath must not be one of the paths the pods mount already: "
                 + ", ".join(RESERVED_MOUNT_PATHS)),
            rule("!has(self.persistentVolumeClaim) || !has(self.persistentVolumeClaim.subPath) "
                 "|| !(self.persistentVolumeClaim.subPath.startsWith('/') || "
                 "self.persistentVolumeClaim.subPath.matches('(^|/)[.][.](/|$)'))",
                 "model.persistentVolumeClaim.subPath must be a relative path without '..'"),
            rule(f"!({mounted}) || !has(self.path) || self.path == self.mountPath || "
                 "self.path.startsWith(self.mountPath + '/')",
                 "model.path must lie under model.mountPath when the model comes from a "
                 "volume"),
        ),
    )


def _image(component: str, runs: str) -> dict:
    return {
        "image": string(f"{component} image (runs {runs}).", min_length=1, max_length=1024),
        "imagePullPolicy": string("Image pull policy.", enum=PULL_POLICIES,
                                  default="IfNotPresent"),
    }


def _compile_cache() -> dict:
    return obj(
        {
            "persistentVolumeClaim": obj(
                {
                    "claimName": string("Name of the PersistentVolumeClaim (ReadWriteMany when "
                                        "server pods span nodes).", min_length=1,
                                        max_length=253, pattern=DNS_SUBDOMAIN),
                    "subPath": string("Sub-directory of the volume to use.", max_length=1024),
                },
                "Keep the cache on a PVC, shared by every server pod.",
                required=("claimName",),
            ),
            "hostPath": obj(
                {"path": string("Directory on the node, writable by the user the server "
                                "pods run as (a directory the kubelet creates is root's).",
                                pattern=r"^/", max_length=1024)},
                "Keep the cache in a directory on each node: pods on a node share it.",
                required=("path",),
            ),
        },
        "A writable volume for torch.compile's caches (the server's --compile-cache): a "
        "server pod that finds an earlier pod's compile there reuses its generated graphs and "
        "kernels instead of building them again. Without it each new pod compiles from "
        "scratch.",
        rules=(
            rule("has(self.persistentVolumeClaim) != has(self.hostPath)",
                 "give exactly one of server.compileCache.persistentVolumeClaim and "
                 "server.compileCache.hostPath"),
            rule("!has(self.persistentVolumeClaim) || !has(self.persistentVolumeClaim.subPath) "
                 "|| !(self.persistentVolumeClaim.subPath.startsWith('/') || "
                 "self.persistentVolumeClaim.subPath.matches('(^|/)[.][.](/|$)'))",
                 "server.compileCache.persistentVolumeClaim.subPath must be a relative path "
                 "without '..'"),
        ),
    )


def _server() -> dict:
    return obj(
        {
            **_image("Server", "`hedgerow server`"),
            "replicas": integer("Server replicas when autoscaling is off (one GPU each).",
                                default=1, minimum=0, maximum=1000),
            "gpus": integer("GPUs per server pod: 1, or 0 to run on CPU (a server drives one "
                            "GPU; scale with replicas).", default=1, minimum=0, maximum=1),
            "gpuResource": string("Extended resource name of a GPU (domain/name).",
                                  default="nvidia.com/gpu", pattern=EXTENDED_RESOURCE,
                                  max_length=253),
            "cpu": quantity("CPU request of a server pod.", default="4"),
            "memory": quantity("Memory request and limit of a server pod.", default="32Gi"),
            **knobs.properties(knobs.SERVER),
            "graphs": obj(knobs.properties(knobs.SERVER, "graphs"),
                          "The CUDA-graph grid: token buckets up to maxTokens times sequence "
                          "buckets, and the hot set captured before a pod joins traffic.",
                          default={}, rules=_graph_rules()),
            "nodeSelector": _node_selector("server"),
            "tolerations": _tolerations("server"),
            "priorityClassName": string("PriorityClass of the server pods.", max_length=253,
                                        pattern=DNS_SUBDOMAIN),
            "maxUnavailable": integer("PodDisruptionBudget: server pods that may be evicted "
                                      "at once.", default=1, minimum=0, maximum=1000),
            "drainSeconds": integer("preStop pause before SIGTERM, so gateways see the pod "
                                    "leave the Service first.", default=5, minimum=0,
                                    maximum=300),
            "startupSeconds": integer("How long a server may take to load the model and start "
                                      "gRPC before it is restarted.", default=900, minimum=10,
                                      maximum=7200),
            "compileCache": _compile_cache(),
            "podTemplate": pod_template("server"),
        },
        "The gRPC embedding servers (one per GPU).",
        required=("image",),
        rules=(rule("self.maxRequestTokens <= self.maxInflightTokens",
                    "server.maxRequestTokens must not exceed server.maxInflightTokens, or "
                    "such a request could never be admitted"),
               rule("!has(self.priorityClassName) || !has(self.podTemplate) || "
                    "!has(self.podTemplate.priorityClassName)",
                    "give server.priorityClassName or server.podTemplate.priorityClassName, "
                    "not both"),
               rule("self.gpus > 0 || self.dtype != 'float8'",
                    "server.dtype float8 runs on a GPU's FP8 tensor cores: give server.gpus 1, "
                    "or another dtype")),
    )


def _gateway() -> dict:
    return obj(
        {
            **_image("Gateway", "`hedgerow gateway`; no torch"),
            "replicas": integer("Gateway replicas when gateway.autoscaling is off.", default=2,
                                minimum=1, maximum=1000),
            "cpu": quantity("CPU request of a gateway pod; its whole cores (rounded up) are "
                            "the pod's worker processes unless workers is given.", default="2"),
            "workers": integer("Worker processes per gateway pod (each with its own event "
                               "loop and tokenizer). Default: cpu rounded up to whole cores.",
                               minimum=1, maximum=int(gateway_sizing.WORKERS.maximum)),
            "memory": quantity("Memory request and limit of a gateway pod. Default: "
                               f"{gateway_sizing.BASE_MEMORY_MIB}Mi plus "
                               f"{gateway_sizing.WORKER_MEMORY_MIB}Mi per worker (measured "
                               "with the MiniLM tokenizer; give more for a larger one)."),
            **knobs.properties(knobs.GATEWAY),
            "templates": obj(knobs.properties(knobs.GATEWAY, "templates"),
                             "Prefixes per input type. Default: the model's own prompts."),
            "apiKeySecret": obj(
                {
                    "name": string("Secret name.", min_length=1, max_length=253,
                                   pattern=DNS_SUBDOMAIN),
                    "key": string("Key holding the API keys, one per line.",
                                  default="api-keys", min_length=1, max_length=253,
                                  pattern=SECRET_KEY),
                },
                "Secret with the accepted API keys. Without it the API is open.",
                required=("name",),
            ),
            "serviceType": string("Type of the gateway Service.",
                                  enum=("ClusterIP", "NodePort", "LoadBalancer"),
                                  default="ClusterIP"),
            "nodeSelector": _node_selector("gateway"),
            "tolerations": _tolerations("gateway"),
            "podTemplate": pod_template("gateway"),
            "autoscaling": GATEWAY_AUTOSCALING,
        },
        "The HTTP gateways: tokenize, chunk, route to servers, merge.",
        required=("image",),
    )


# spec.autoscaling and spec.networkPolicy have modules of their own (operator/crd_autoscaling.py,
# operator/crd_network.py).

WARMUP = obj(
    {
        "readinessGate": boolean("Hold a server pod out of traffic until its hot CUDA graphs "
                                 "are captured (pod readiness gate hedgerow.dev/graphs-warm).",
                                 default=True),
    },
    "Warmup tracking.",
    default={},
)

GUARD = obj(
    {
        "configMap": string("ConfigMap in this namespace holding the golden set (`hedgerow "
                            "guard record` writes it).", min_length=1, max_length=253,
                            pattern=DNS_SUBDOMAIN),
        "key": string("Key of the ConfigMap that holds the golden set.",
                      default=golden_set.CONFIG_MAP_KEY, min_length=1, max_length=253,
                      pattern=SECRET_KEY),
        "minCosine": number("Smallest cosine a new server's vector of each golden text must "
                            "keep to the recorded one (a sparse model's: over the union of "
                            "their token ids). A golden set without vectors asks for the same "
                            "fingerprint instead.",
                            default=golden_set.DEFAULT_MIN_COSINE, minimum=0.0, maximum=1.0),
        "maxScoreDelta": number("A cross-encoder's golden set (task rerank): largest difference "
                                "of a new server's raw score of each golden pair from the "
                                "recorded one; two documents of one query recorded further "
                                "apart than this must also keep their order.",
                                default=golden_set.DEFAULT_MAX_SCORE_DELTA, minimum=0.0),
    },
    "The golden set that defines this service's space: each new server runs its texts (a "
    "cross-encoder: its query-document pairs) at start, and its readiness gate stays closed "
    "(condition SpaceMatches=False) until the answers match. Needs warmup.readinessGate.",
    required=("configMap",),
)

SPEC = obj(
    {"model": _model(), "server": _server(), "gateway": _gateway(), "autoscaling": AUTOSCALING,
     "warmup": WARMUP, "guard": GUARD, "networkPolicy": NETWORK_POLICY,
     "tls": TLS},
    "Desired state of an EmbeddingService.",
    required=("model", "server", "gateway"),
    rules=(rule("self.gateway.chunkTokens <= self.server.maxRequestTokens",
                "gateway.chunkTokens must not exceed server.maxRequestTokens, or chunks would "
                "be refused"),
           rule("!has(self.guard) || self.warmup.readinessGate",
                "guard needs warmup.readinessGate: true, the gate that keeps a server whose "
                "space does not match out of traffic")),
)

CONDITION = obj(
    {
        "type": string("Ready, Progressing, GraphsWarm, SpaceMatches or ModelFetched."),
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
        "model": string("The model served: the Hugging Face id (with spec.model.huggingFace, "
                        "id@commit: the commit the pods fetched), or the path."),
        "replicas": integer("Server pods that exist."),
        "readyReplicas": integer("Server pods ready for traffic."),
        "warmReplicas": integer("Server pods whose hot CUDA graphs are captured."),
        "gatewayReadyReplicas": integer("Gateway pods ready for traffic."),
        "url": string("Where clients in the cluster reach the API: the gateway Service's "
                      "address (http://<name>.<namespace>.svc:8080)."),
        "selector": string("Label selector of the server pods (the scale subresource's, as "
                           "`kubectl scale` and an HPA on this resource read it)."),
        "conditions": {
            "type": "array", "description": "Ready, Progressing, GraphsWarm, with "
                                            "spec.guard SpaceMatches, with "
                                            "spec.model.huggingFace ModelFetched.",
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
        rule(f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
             f"metadata.name must be at most {MAX_NAME_LENGTH} characters (children append "
             "suffixes and Service names are DNS labels)"),
        rule(f"self.metadata.name.matches('{DNS_LABEL}')",
             "metadata.name must be a DNS label: lowercase letters, digits and '-', starting "
             "with a letter and ending with a letter or digit (it names Services)"),
        rule(" && ".join(f"!self.metadata.name.endsWith('{suffix}')" for suffix in CHILD_SUFFIXES),
             "metadata.name must not end in " + " or ".join(CHILD_SUFFIXES) + ": the children "
             "of another EmbeddingService are named that way"),
    ),
)

PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".status.model"},
    {"name": "Ready", "type": "string",
     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
    {"name": "Warm", "type": "integer", "jsonPath": ".status.warmReplicas"},
    {"name": "Space", "type": "string",
     "jsonPath": '.status.conditions[?(@.type=="SpaceMatches")].status'},
    {"name": "URL", "type": "string", "jsonPath": ".status.url"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# `kubectl scale embsvc NAME --replicas N` sets the server replicas (ignored while
# spec.autoscaling is on: the HPA owns them then).
SCALE = {"specReplicasPath": ".spec.server.replicas", "statusReplicasPath": ".status.replicas",
         "labelSelectorPath": ".status.selector"}


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
                "subresources": {"status": {}, "scale": SCALE},
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "schema": {"openAPIV3Schema": ROOT},
            }],
        },
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True  # a node shared by two fields is written out twice, as kubectl expects


def crd_yaml() -> str:
    header = ("# Generated from operator/crd.py and the server's and gateway's settings by "
              "`make generate`. Do not edit.\n")
    return header + yaml.dump(build_crd(), Dumper=_Dumper, sort_keys=False, width=100)


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def _rows(node: dict, prefix: str) -> list[str]:
    rows = []
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        kind = child.get("type", "quantity")
        if kind == "array":
            kind = f"list of {child['items'].get('type', 'quantity')}"
        default = child.get("default")
        shown = "" if default in (None, {}) else f"`{_shown(default)}`"
        description = child.get("description", "").replace("|", "\\|")
        rows.append(f"| `{path}` | {kind} | {shown} | {description} |")
        if child.get("type") == "object" and "properties" in child:
            rows += _rows(child, path)
    return rows


def spec_table() -> str:
    """Markdown table of every spec field (docs/operator.md embeds it; a test keeps it current)."""
    head = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    return "\n".join(head + _rows(SPEC, "spec")) + "\n"
