"""Reconciles of one resource never interleave: the resync timer and a change handler run
concurrently, and a pass that read the spec before a change must not apply the old children
after the new ones (on a GPU fleet, a rollout forth and back). A stand-in client holds the
first pass's first read until the spec has changed and a second pass is waiting."""

import asyncio
import copy
import logging

import kopf

from hedgerow.operator import handlers, names

BODY = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u", "generation": 1},
    "spec": {"model": {"path": "/models/m", "hostPath": {"path": "/srv/models"}},
             "server": {"image": "s:1"}, "gateway": {"image": "g:1"}},
}


class HeldKube:
    """No objects exist; the first read waits for `release`; applies are recorded."""

    def __init__(self) -> None:
        self.held, self.release = asyncio.Event(), asyncio.Event()
        self.images: list[str] = []

    async def get(self, api_version, kind, namespace, name):
        if not self.held.is_set():
            self.held.set()
            await self.release.wait()
        return None

    async def list(self, api_version, kind, namespace, labels):
        return []

    async def delete(self, api_version, kind, namespace, name):
        return False

    async def apply(self, manifest, field_manager=names.FIELD_MANAGER, dry_run=False):
        if (manifest["kind"], manifest["metadata"]["name"]) == ("Deployment", "emb-server") \
                and not dry_run:
            self.images.append(manifest["spec"]["template"]["spec"]["containers"][0]["image"])
        return manifest


async def _two_passes(kube: HeldKube, body: dict) -> None:
    ctx = handlers.Context(config=None, kube=kube)
    log = logging.getLogger("test")
    first = asyncio.create_task(handlers.reconcile(ctx, body, kopf.Patch(), log))
    await asyncio.wait_for(kube.held.wait(), 10)
    body["spec"]["server"]["image"] = "s:2"  # the user's change; kopf's body is live
    body["metadata"]["generation"] = 2
    second = asyncio.create_task(handlers.reconcile(ctx, body, kopf.Patch(), log))
    await asyncio.sleep(0.2)  # without the lock, the second pass finishes here
    kube.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 10)


def test_the_later_pass_applies_the_later_spec_last():
    kube = HeldKube()
    original, kopf.event = kopf.event, lambda *a, **k: None
    try:
        asyncio.run(_two_passes(kube, copy.deepcopy(BODY)))
    finally:
        kopf.event = original
    assert kube.images == ["s:1", "s:2"]
