"""Gateway workers and memory from spec.gateway: workers follow the CPU request (or
spec.gateway.workers), memory follows the workers (or spec.gateway.memory), and the pods'
settings load into the real GatewaySettings with that worker count."""

import copy

import pytest

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.operator import gateway_sizing
from hedgerow.operator.build_gateway import build_gateway_config, build_gateway_deployment
from hedgerow.operator.spec import parse
from tests.operator.api_server import Refused, admit

BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "1234", "generation": 1},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s:1"},
             "gateway": {"image": "g:1"}},
}


def _gateway(**fields):
    body = copy.deepcopy(BASE)
    body["spec"]["gateway"].update(fields)
    service = parse(admit(body))
    config = build_gateway_config(service)
    pod = build_gateway_deployment(service, config)["spec"]["template"]["spec"]
    loaded = settings.load(GatewaySettings, None, environ=config["data"])
    return loaded.workers, pod["containers"][0]["resources"]


@pytest.mark.parametrize("cpu, workers", [
    ("2", 2), (2, 2), ("500m", 1), ("1500m", 2), ("8", 8), ("250m", 1), ("4e0", 4),
    ("1000", 256),
])
def test_workers_are_the_whole_cores_of_the_cpu_request(cpu, workers):
    loaded, resources = _gateway(cpu=cpu)
    assert loaded == workers
    memory = f"{gateway_sizing.BASE_MEMORY_MIB + gateway_sizing.WORKER_MEMORY_MIB * workers}Mi"
    assert resources["requests"] == {"cpu": str(cpu), "memory": memory}
    assert resources["limits"] == {"memory": memory}


def test_the_default_pod_runs_two_workers_in_384_mib():
    assert _gateway() == (2, {"requests": {"cpu": "2", "memory": "384Mi"},
                              "limits": {"memory": "384Mi"}})


def test_workers_and_memory_can_be_given():
    loaded, resources = _gateway(cpu="2", workers=6)
    assert loaded == 6 and resources["limits"]["memory"] == "896Mi"
    loaded, resources = _gateway(cpu="2", workers=6, memory="3Gi")
    assert loaded == 6 and resources["requests"]["memory"] == resources["limits"]["memory"] \
        == "3Gi"


@pytest.mark.parametrize("workers", [0, 257])
def test_a_worker_count_out_of_bounds_is_refused(workers):
    with pytest.raises(Refused, match="spec.gateway.workers"):
        _gateway(workers=workers)
