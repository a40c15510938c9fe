"""A Kubernetes pod starts from its process's own defaults. The CRD's field for every setting it
exposes (default, bounds, choices, help), and the environment the operator writes for a spec
that sets none of them, hold to ServerSettings, GpuSettings and GatewaySettings. Names are
mapped through knobs.py; no default value is written in this file."""

import pytest

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gpu_settings import GpuSettings
from hedgerow.operator import crd, knobs
from hedgerow.operator.build_gateway import build_gateway_config
from hedgerow.operator.build_server import build_server_config
from hedgerow.operator.spec import parse
from hedgerow.server_settings import ServerSettings

BARE = {
    "apiVersion": crd.API_VERSION, "kind": crd.KIND,
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u"},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s"},
             "gateway": {"image": "g"}},
}
# What the operator sets from the resource itself (where the model is, who listens where),
# not from a setting's default.
FROM_THE_RESOURCE = {
    ServerSettings: {"model", "host", "device"},
    GatewaySettings: {"host", "service_dns", "model", "served_model_name",
                      "workers"},  # from spec.gateway.cpu (operator/gateway_sizing.py)
}


def _node(component: str, path: str) -> dict:
    node = crd.ROOT["properties"]["spec"]["properties"][component]
    for part in path.split("."):
        node = node["properties"][part]
    return node


@pytest.mark.parametrize("component, knob", [("server", k) for k in knobs.SERVER]
                         + [("gateway", k) for k in knobs.GATEWAY], ids=lambda k: str(k))
def test_each_crd_field_is_its_setting(component, knob):
    node, field = _node(component, knob.path), knob.field
    if field.default is None:
        assert "default" not in node
    else:
        assert node["default"] == knobs.to_crd(knob, field.default)
    bounded = node["items"] if node["type"] == "array" and not knob.shapes else node
    assert bounded.get("minimum") == field.minimum and bounded.get("maximum") == field.maximum
    assert node.get("enum", None) == (list(field.choices) if field.choices else None)
    assert node.get("maxItems") == field.max_items
    assert field.help.split(".")[0].split(" --")[0] in node["description"]


@pytest.mark.parametrize("build, classes", [
    (build_server_config, (ServerSettings, GpuSettings)),
    (build_gateway_config, (GatewaySettings,)),
])
def test_a_bare_spec_starts_pods_on_the_processes_defaults(build, classes):
    env = build(parse(BARE))["data"]
    for cls in classes:
        loaded = settings.load(cls, None, environ=env)
        for field in settings.fields_of(cls):
            value = getattr(loaded, field.name)
            if field.name in FROM_THE_RESOURCE.get(cls, ()):
                assert field.env in env, f"{field.env} is the operator's to set"
            else:
                assert value == field.default, f"{cls.__name__}.{field.name}"


def test_the_default_server_is_the_benchmarked_one():
    """bfloat16 on the GPU (what auto resolves to there), compiled as measured, every default
    batch within the graph grid, the same hot set."""
    env = build_server_config(parse(BARE))["data"]
    server = settings.load(ServerSettings, None, environ=env)
    gpu = settings.load(GpuSettings, None, environ=env)
    assert server.device == "cuda" and server.dtype == "auto"
    assert gpu.compile and gpu.graphs
    assert server.max_batch_seqs == gpu.graph_max_seqs
    assert gpu.grid().config_for(server.max_batch_seqs, server.max_batch_tokens) is not None
    assert gpu.hot_set() == GpuSettings().hot_set()
