"""Two `hedgerow operator` processes with kopf peering against kmock, as the chart runs them:
one acts and the other stands by; when the active one is killed (SIGKILL, no clean hand-over)
the standby takes over once its record expires, and reconciles a resource created after the
kill. Every request they make is one the chart's RBAC grants."""

import asyncio
import signal
import sys

import pytest

from tests.operator.test_rbac import PEERING as PEERING_GRANTS
from tests.operator.test_rbac import granted, used

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

PEERING = "hedgerow"
LIFETIME_SECONDS = 3
PEERINGS_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"


def register_peering(kmock) -> None:
    """kopf's peering resource, as the chart's crds/kopf-peering.yaml defines it."""
    kmock.resources["kopf.dev/v1/clusterkopfpeerings"] = {
        "kind": "ClusterKopfPeering", "singular": "clusterkopfpeering", "namespaced": False,
        "verbs": {"get", "list", "watch", "create", "update", "patch", "delete"},
    }


async def _start(kube_api, env, name):
    return await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "hedgerow", "operator", "--peering", PEERING,
        "--peering-lifetime", str(LIFETIME_SECONDS), "--resync-interval", "0.5",
        "--warmup-interval", "0.5", "--warmup-port", str(kube_api.warmup.port),
        "--health-port", "0", env={**env, "KUBECONFIG": str(kube_api.kubeconfig),
                                   "POD_ID": name},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)


async def _peers(kube_api):
    body = await kube_api.get(f"{PEERINGS_PATH}/{PEERING}")
    return set((body or {}).get("status") or {})


async def test_the_standby_operator_takes_over_when_the_active_one_is_killed(
        kube_api, kmock, subprocess_env):
    register_peering(kmock)
    await kube_api.post(PEERINGS_PATH, {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
        "metadata": {"name": PEERING, "resourceVersion": "1"}})
    first = await _start(kube_api, subprocess_env, "operator-a")
    second = None
    try:
        await kube_api.eventually(lambda: _has(kube_api, {"operator-a"}), "operator-a's record")
        await kube_api.post(kube_api.cr_path, kube_api.resource("one"))
        await kube_api.eventually(lambda: _deployment(kube_api, "one"), "one reconciled",
                                  timeout=60)
        second = await _start(kube_api, subprocess_env, "operator-b")
        await kube_api.eventually(lambda: _has(kube_api, {"operator-a", "operator-b"}),
                                  "both records")

        first.send_signal(signal.SIGKILL)
        await first.wait()
        await kube_api.post(kube_api.cr_path, kube_api.resource("two"))
        await kube_api.eventually(lambda: _deployment(kube_api, "two"),
                                  "two reconciled by the standby", timeout=60)
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
        outputs = [(await asyncio.wait_for(p.communicate(), timeout=60))[0].decode()
                   for p in (first, second) if p is not None]
    # kopf starts a peering replica paused; the standby acted only after it resumed.
    standby = outputs[1]
    resumed = standby.find("Resuming operations")
    assert resumed > 0, standby[-3000:]
    acted = [standby.find(mark) for mark in ("Handler ", "Timer ")]
    assert all(index == -1 or index > resumed for index in acted), standby[:3000]
    made = used(kmock)
    assert made - granted() == set(), "requests the chart's RBAC would forbid"
    assert PEERING_GRANTS <= made and PEERING_GRANTS <= granted()


async def _has(kube_api, identities):
    return await _peers(kube_api) >= identities


async def _deployment(kube_api, name):
    return await kube_api.get(kube_api.child_path("apps/v1", "deployments", f"{name}-gateway"))
