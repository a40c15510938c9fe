"""The EmbeddingService CRD's `spec.server.podTemplate` and `spec.gateway.podTemplate`: the
pod-spec fields a cluster operator sets on the pods, and the rules that keep them off what the
builders own.

Owns the schema of those fields (operator/pod_template.py merges them onto the builders'
output) and, for each, the CEL rule that refuses a value which would silently break the pod:
selector labels, the operator's annotations, an environment variable the operator writes,
memory or GPU resources that have fields of their own. Probes, ports, the security context,
volumes and the command are not fields here at all. Knows nothing about manifests.
"""

from hedgerow import settings
from hedgerow.operator import knobs
from hedgerow.operator.patterns import DNS_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME
from hedgerow.operator.schema import Node, array, obj, quantity, rule, string, string_map

# Labels that select the pods (and the owner's): the Deployment's selector is built from them.
OWN_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
              "app.kubernetes.io/component", "app.kubernetes.io/managed-by")
# Annotation prefixes the builders write (config and golden-set digests, where Prometheus
# scrapes).
OWN_ANNOTATION_PREFIXES = ("hedgerow.dev/", "prometheus.io/")
# Settings the operator writes from the resource itself (build_server.server_env,
# build_gateway.gateway_env), besides every knob; HOME is the containers' writable home.
FROM_THE_RESOURCE = {
    "server": ("model", "host", "port", "http_port", "device", "golden_set", "compile_cache",
               "cpu_threads"),
    "gateway": ("host", "port", "service_dns", "model", "served_model_name", "workers",
                "api_keys_file"),
}
# Resources a podTemplate may add; memory is `memory` (request = limit), GPUs `gpus`, the
# CPU request `cpu`.
EXTRA_LIMITS = ("cpu", "ephemeral-storage")
EXTRA_REQUESTS = ("ephemeral-storage",)


def operator_env(component: str) -> tuple[str, ...]:
    """Every variable the operator sets in a `component` container."""
    owned = knobs.SERVER if component == "server" else knobs.GATEWAY
    return ("HOME", *(settings.env_name(name) for name in FROM_THE_RESOURCE[component]),
            *(knob.field.env for knob in owned))


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _free_object(description: str) -> Node:
    """An object of a core/v1 type kept as given: the API server checks it against the real
    type when the operator's dry run of the Deployment applies it."""
    return {"type": "object", "description": description,
            "x-kubernetes-preserve-unknown-fields": True}


def _env(component: str) -> Node:
    reserved = operator_env(component)
    item = obj(
        {
            "name": string("Variable name.", min_length=1, max_length=256,
                           pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"),
            "value": string("Its value.", max_length=32768),
            "valueFrom": _free_object("Where the value comes from (core/v1 EnvVarSource: a "
                                      "Secret's or ConfigMap's key, a pod field)."),
        },
        "An environment variable (core/v1 EnvVar).",
        required=("name",),
        rules=(rule(f"!(self.name in {_cel_list(reserved)})",
                    f"podTemplate.env must not set a variable the operator writes for the "
                    f"{component} (HOME and the HEDGEROW_* settings of its spec fields): set "
                    f"the spec field instead"),
               rule("!(has(self.value) && has(self.valueFrom))",
                    "an env entry takes value or valueFrom, not both")),
    )
    return array(item, f"Extra environment variables of the {component} container (after the "
                       "operator's own). HEDGEROW_* settings no spec field exposes may be set "
                       "here.", max_items=64,
                 rules=(rule("self.all(e, self.exists_one(f, f.name == e.name))",
                             "podTemplate.env names must be unique"),))


def _resources(component: str) -> Node:
    def limited(allowed: tuple[str, ...], which: str) -> Node:
        node = {"type": "object",
                "description": f"Resource {which} to add: " + ", ".join(allowed) + ".",
                "additionalProperties": quantity("A resource quantity."), "maxProperties": 4,
                "x-kubernetes-validations": [rule(
                    f"self.all(k, k in {_cel_list(allowed)})",
                    f"podTemplate.resources.{which} may set only " + " and ".join(allowed)
                    + f": memory is spec.{component}.memory (request and limit), the CPU "
                    f"request spec.{component}.cpu"
                    + (", GPUs spec.server.gpus" if component == "server" else ""))]}
        return node

    return obj({"limits": limited(EXTRA_LIMITS, "limits"),
                "requests": limited(EXTRA_REQUESTS, "requests")},
               f"Resources of the {component} container besides its CPU request and memory: a "
               "CPU limit, ephemeral storage.")


def pod_template(component: str) -> Node:
    """The `podTemplate` field of spec.<component>."""
    selector = _cel_list(OWN_LABELS)
    prefixes = " || ".join(f"k.startsWith('{p}')" for p in OWN_ANNOTATION_PREFIXES)
    return obj(
        {
            "labels": string_map(
                f"Extra labels of the {component} pods.", max_value_length=63,
                value_pattern=LABEL_VALUE,
                rules=(rule(f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
                            "podTemplate.labels keys must be label keys"),
                       rule(f"self.all(k, !(k in {selector}))",
                            "podTemplate.labels must not set " + ", ".join(OWN_LABELS)
                            + ": the operator selects its pods by them"))),
            "annotations": string_map(
                f"Extra annotations of the {component} pods.", max_value_length=65536,
                rules=(rule(f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
                            "podTemplate.annotations keys must be qualified names"),
                       rule(f"self.all(k, !({prefixes}))",
                            "podTemplate.annotations must not use the prefixes "
                            + ", ".join(OWN_ANNOTATION_PREFIXES)
                            + ": the operator writes those (digests that roll the pods, "
                              "scrape settings)"))),
            "imagePullSecrets": array(
                obj({"name": string("Secret name.", min_length=1, max_length=253,
                                    pattern=DNS_SUBDOMAIN)},
                    "A Secret of type kubernetes.io/dockerconfigjson.", required=("name",)),
                "Secrets for pulling the images from a private registry.", max_items=16),
            "serviceAccountName": string(
                f"Service account of the {component} pods (its token is not mounted: the "
                "pods never call the Kubernetes API).", max_length=253, pattern=DNS_SUBDOMAIN),
            "priorityClassName": string(f"PriorityClass of the {component} pods.",
                                        max_length=253, pattern=DNS_SUBDOMAIN),
            "affinity": _free_object(f"Affinity of the {component} pods (core/v1 Affinity)."),
            "topologySpreadConstraints": array(
                _free_object("A core/v1 TopologySpreadConstraint."),
                f"How the {component} pods spread. Default: across nodes (topologyKey "
                "kubernetes.io/hostname, maxSkew 1, ScheduleAnyway); [] for none.",
                max_items=8),
            "env": _env(component),
            "envFrom": array(
                _free_object("A core/v1 EnvFromSource (a ConfigMap or Secret)."),
                f"Extra variable sources of the {component} container; the operator's "
                "ConfigMap comes after them and wins on a name both hold.", max_items=16),
            "resources": _resources(component),
        },
        f"Pod-spec fields of the {component} pods, merged onto what the operator builds. "
        "Probes, ports, the security context, volumes and the command are the operator's.",
    )
