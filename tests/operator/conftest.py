"""Fixtures for running the real operator against kmock (a Kubernetes API emulator).

kmock serves the Kubernetes HTTP API from memory; the operator under test is the production
kopf operator (`hedgerow.operator.main.operate`) logging in with a kubeconfig that points at
kmock. kmock has no controllers: no pods appear for a Deployment, no garbage collection, no
Deployment status. Tests create pods and write Deployment status themselves, through the API.
A tiny aiohttp server on loopback stands in for the servers' /warmup endpoint.
"""

import asyncio
import contextlib
import copy
import itertools
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import pytest_asyncio
import yaml
from aiohttp import web
from kmock import KubernetesEmulator, action

from hedgerow.operator import crd
from hedgerow.operator.main import OperatorSettings, operate
from hedgerow.warmup_report import WarmupReport


class Emulator(KubernetesEmulator):
    """kmock's emulator with a bounded request journal, and every request kept in `journal`.

    To decide whether a reaction "sees" the request being served, kmock scans every request
    in its journal through the reaction's filters: each request costs more than the one
    before. The operator under test makes a few hundred requests a second (resync and warmup
    timers at test intervals), so a test's later requests took tens of milliseconds each,
    reconciles fell seconds behind the spec, and on a slower or busier machine than the one
    that wrote them the kmock tests timed out (test_spec_change_updates_children failed three
    runs of three on a fresh machine). kmock's journal keeps the latest RECENT requests, which
    is all its reactions look at here; tests read `journal` instead.

    Every write also gets a new (unique) `resourceVersion`, as a real API server gives it. kmock keeps
    whatever the first body held ("1" here) forever, and kopf trusts the version: after each
    of its own patches it waits for the event carrying the version that patch returned, and
    takes the object as consistent when it arrives. With one version for everything, the
    first event that arrived after a patch passed, including one the API had sent before
    that patch (a timer's status write racing a spec change), and kopf then ran the change
    handler on a body older than its own last write: the old spec applied again until a
    later event (test_spec_change_updates_children, test_rbac and
    test_a_spec_that_cannot_be_applied_keeps_the_last_good_children failed that way now and
    then, more often on a loaded machine).

    A created object with `generateName` and no name gets a unique name, as a real API server
    gives it. kmock leaves it nameless, so every kopf Event (kopf posts them with
    `generateName`) but the first in a namespace was refused as a conflict with that first one,
    and a test waiting for a particular Event passed only when it happened to be posted first
    (test_a_missing_or_malformed_golden_set_gets_a_clear_condition_and_no_children failed that
    way on fresh clones, twice)."""

    RECENT = 64

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.journal: list = []
        self.versions = itertools.count(1000)
        self.generated = itertools.count(1)

    async def _handle(self, request):
        self.journal.append(request)
        del self._requests[:-self.RECENT]
        writes = request.action in (action.CREATE, action.UPDATE)
        if request.resource is not None and writes and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            metadata["resourceVersion"] = str(next(self.versions))
            if request.action == action.CREATE and not metadata.get("name") \
                    and metadata.get("generateName"):
                metadata["name"] = f"{metadata['generateName']}{next(self.generated):05d}"
        return await super()._handle(request)


@pytest.fixture
def kmock_options(kmock_options):
    """Every test in this folder runs against `Emulator`."""
    return {**kmock_options, "cls": Emulator}


NAMESPACE = "ml"
CR_PATH = f"/apis/{crd.GROUP}/{crd.VERSION}/namespaces/{NAMESPACE}/{crd.PLURAL}"

BASE_SPEC = {
    "model": {"path": "/models/minilm", "huggingFaceId": "sentence-transformers/all-MiniLM-L6-v2",
              "hostPath": {"path": "/srv/models"}},
    "server": {"image": "registry.example/hedgerow-server:1", "replicas": 2, "gpus": 1},
    "gateway": {"image": "registry.example/hedgerow-gateway:1", "replicas": 1},
    "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5,
                    "targetTokensPerSecond": 50000},
}


def register_resources(kmock: Any) -> None:
    kmock.resources.load_bundled()
    kmock.resources[f"{crd.GROUP}/{crd.VERSION}/{crd.PLURAL}"] = {
        "kind": crd.KIND, "singular": crd.SINGULAR, "namespaced": True,
        "shortnames": set(crd.SHORT_NAMES), "subresources": {"status"},
        "verbs": {"get", "list", "watch", "create", "update", "patch", "delete"},
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "kmock", "user": {"token": "test-token"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock",
                                                   "namespace": NAMESPACE}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def resource(name: str, spec: dict | None = None, **metadata: Any) -> dict:
    return {
        "apiVersion": crd.API_VERSION, "kind": crd.KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
                     "generation": 1, "resourceVersion": "1", **metadata},
        "spec": copy.deepcopy(BASE_SPEC if spec is None else spec),
    }


class Cluster:
    """Reads and writes through kmock's HTTP API, as a user or a controller would."""

    namespace = NAMESPACE
    cr_path = CR_PATH
    resource = staticmethod(resource)
    child_path = staticmethod(lambda *a: child_path(*a))
    eventually = staticmethod(lambda *a, **k: eventually(*a, **k))

    def __init__(self, kmock: Any, warmup: "WarmupServer") -> None:
        self.kmock = kmock
        self.warmup = warmup

    async def get(self, path: str) -> dict | None:
        response = await self.kmock.get(path)
        if response.status == 404:
            return None
        assert response.status == 200, await response.text()
        return await response.json()

    async def post(self, path: str, body: dict) -> dict:
        response = await self.kmock.post(path, json=body)
        assert response.status in (200, 201), await response.text()
        return await response.json()

    async def patch(self, path: str, body: dict) -> dict:
        response = await self.kmock.patch(
            path, json=body, headers={"Content-Type": "application/merge-patch+json"})
        assert response.status == 200, await response.text()
        return await response.json()

    async def delete(self, path: str) -> None:
        response = await self.kmock.delete(path)
        assert response.status == 200, await response.text()

    async def apply_example(self, body: dict) -> tuple[str, str]:
        """Create an examples/ resource with what the README creates first (its model PVC, its
        API-key Secret); returns its namespace and name."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        body["metadata"].update(uid=f"uid-{name}", generation=1, resourceVersion="1")
        claim = body["spec"]["model"].get("persistentVolumeClaim")
        if claim:
            await self.post(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim["claimName"], "namespace": namespace,
                             "resourceVersion": "1"},
                "spec": {"accessModes": ["ReadOnlyMany"],
                         "resources": {"requests": {"storage": "20Gi"}}}})
        keys = body["spec"]["gateway"].get("apiKeySecret")
        if keys:
            await self.post(f"/api/v1/namespaces/{namespace}/secrets", {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": keys["name"], "namespace": namespace,
                             "resourceVersion": "1"},
                "data": {keys.get("key", "api-keys"): "a2V5Cg=="}})
        await self.post(f"/apis/hedgerow.dev/v1alpha1/namespaces/{namespace}/embeddingservices",
                        body)
        return namespace, name


def child_path(api_version: str, plural: str, name: str) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{NAMESPACE}/{plural}/{name}"


async def eventually(probe: Callable[[], Awaitable[Any]], what: str,
                     timeout: float = 30.0) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`
    (a generous bound on a loaded machine, not a performance assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}")


def warmup_body(**fields: Any) -> dict:
    """A /warmup body as a server answers it (the contract in hedgerow.warmup_report)."""
    return WarmupReport(**fields).body({})


class WarmupServer:
    """Serves /warmup on 127.0.0.1 and 127.0.0.2 (one port), so two pods can report apart:
    a pod at 127.0.0.2 gets `second` when that is set, else `report`, which every other pod
    gets (None → 503)."""

    SECOND_IP = "127.0.0.2"

    def __init__(self) -> None:
        self.report: dict | None = warmup_body(loaded=False, hot_set=4)
        self.second: dict | None = None
        self.port = 0
        self.hits = 0

    async def _warmup(self, request: web.Request) -> web.Response:
        self.hits += 1
        local_ip = request.transport.get_extra_info("sockname")[0]
        report = self.second if local_ip == self.SECOND_IP and self.second else self.report
        if report is None:
            return web.Response(status=503, text="not yet")
        return web.json_response(report)

    @contextlib.asynccontextmanager
    async def running(self):
        app = web.Application()
        app.router.add_get("/warmup", self._warmup)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        await web.TCPSite(runner, self.SECOND_IP, self.port).start()
        try:
            yield self
        finally:
            await runner.cleanup()


@pytest_asyncio.fixture
async def kube_api(kmock, tmp_path, monkeypatch):
    """kmock with the CRD registered and KUBECONFIG pointing at it; no operator yet."""
    register_resources(kmock)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    warmup = WarmupServer()
    async with warmup.running():
        api = Cluster(kmock, warmup)
        api.kubeconfig = kubeconfig
        yield api


@pytest_asyncio.fixture
async def cluster(kube_api):
    """The operator running against kube_api (resync every 0.5 s, warmup every 0.3 s so the
    tests converge quickly). Cluster-wide, as the chart runs it: kmock cannot serve the
    namespace list kopf watches in namespaced mode."""
    config = OperatorSettings(resync_interval=0.5, warmup_interval=0.3,
                              warmup_port=kube_api.warmup.port, warmup_timeout=2.0,
                              health_port=0)
    # Its own thread and event loop, as in production: kopf's shutdown cancels every task
    # of its loop that it did not start with, which would include the test's own tasks.
    stop, ready = threading.Event(), threading.Event()
    running: dict[str, Any] = {}

    async def run() -> None:
        running["loop"] = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.CancelledError):
            await operate(config, stop_flag=stop, ready_flag=ready)

    def cancel_every_task() -> None:
        for task in asyncio.all_tasks(running["loop"]):
            task.cancel()

    thread = threading.Thread(target=asyncio.run, args=(run(),), name="operator", daemon=True)
    thread.start()
    assert await asyncio.to_thread(ready.wait, 30), "the operator did not start"
    try:
        yield kube_api
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 1)
        # A timer that kopf respawned for an event still in flight at the stop outlives its
        # daemon killer, and kopf waits 5 s for such tasks before it cancels them; cancelling
        # them ends that wait. Again until the thread ends: Python 3.11's asyncio.wait_for (in
        # kopf's sleeps) can swallow a cancel that lands as its wait ends (fixed in 3.12).
        for _ in range(60):
            if not thread.is_alive():
                break
            with contextlib.suppress(RuntimeError):  # its loop closed just now
                running["loop"].call_soon_threadsafe(cancel_every_task)
            await asyncio.to_thread(thread.join, 0.5)
        assert not thread.is_alive(), "the operator did not stop"
