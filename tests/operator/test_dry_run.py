"""A child the API server refuses (validation, an admission webhook, a quota) ends as
Ready=False with the API server's message before any child is written.

kmock neither validates children nor honours dryRun, so no emulator here can refuse one; this
test drives `reconcile` with a stand-in client that refuses the server Deployment, and records
what was written.
"""

import asyncio
import copy
import logging

import kopf

from hedgerow.operator import handlers, names
from hedgerow.operator.kube import ApiError

BODY = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u", "generation": 3},
    "spec": {"model": {"path": "/models/m", "hostPath": {"path": "/srv/models"}},
             "server": {"image": "s:1", "replicas": 2}, "gateway": {"image": "g:1"}},
}


class RefusingKube:
    """No objects exist; an apply (dry run or not) of `refused` answers `status`."""

    def __init__(self, refused: str, status: int) -> None:
        self.refused, self.status = refused, status
        self.dry_runs, self.writes = [], []

    async def get(self, api_version, kind, namespace, name):
        return None

    async def list(self, api_version, kind, namespace, labels):
        return []

    async def delete(self, api_version, kind, namespace, name):
        return False

    async def apply(self, manifest, field_manager=names.FIELD_MANAGER, dry_run=False):
        key = (manifest["kind"], manifest["metadata"]["name"])
        (self.dry_runs if dry_run else self.writes).append(key)
        if key == ("Deployment", self.refused):
            raise ApiError(self.status, "APPLY Deployment ml/emb-server", "admission webhook "
                           "\"policy.example\" denied the request: privileged GPU pods")
        return manifest


def _reconcile(kube):
    patch = kopf.Patch()
    ctx = handlers.Context(config=None, kube=kube)
    events = []
    original, kopf.event = kopf.event, lambda body, **kw: events.append(kw)
    try:
        asyncio.run(handlers.reconcile(ctx, copy.deepcopy(BODY), patch,
                                       logging.getLogger("test")))
    finally:
        kopf.event = original
    return patch, events


def test_a_refused_child_is_ready_false_and_nothing_is_written():
    kube = RefusingKube("emb-server", 422)
    patch, events = _reconcile(kube)
    assert kube.writes == []  # not one child: the dry run came first
    assert ("Deployment", "emb-server") in kube.dry_runs
    ready = next(c for c in patch.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == handlers.REJECTED
    assert "the API server refuses Deployment 'emb-server'" in ready["message"]
    assert "privileged GPU pods" in ready["message"]
    assert any(e["reason"] == handlers.REJECTED and e["type"] == "Warning" for e in events)


def test_a_passing_dry_run_is_followed_by_every_apply():
    kube = RefusingKube("nothing", 422)
    patch, _ = _reconcile(kube)
    assert kube.writes == kube.dry_runs and len(kube.writes) == 10  # with the two NetworkPolicies
    ready = next(c for c in patch.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] != handlers.REJECTED


def test_a_transient_api_failure_is_retried_not_reported():
    kube = RefusingKube("emb-server", 503)
    try:
        _reconcile(kube)
    except kopf.TemporaryError as error:
        assert "HTTP 503" in str(error)
    else:
        raise AssertionError("a 503 must be a TemporaryError (kopf retries it)")
    assert kube.writes == []


def test_children_of_a_recreated_resource_of_the_same_name_are_adopted_not_refused():
    """Deleted and applied again before garbage collection: the old children (warm servers)
    carry the old uid; they are this resource's, not someone else's."""
    old_owner = {"apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
                 "name": "emb", "uid": "old-uid", "controller": True}
    stranger = dict(old_owner, name="other")

    class Existing(RefusingKube):
        def __init__(self, owner):
            super().__init__("nothing", 422)
            self.owner = owner

        async def get(self, api_version, kind, namespace, name):
            return {"metadata": {"name": name, "ownerReferences": [self.owner]}}

    adopted = Existing(old_owner)
    _reconcile(adopted)
    assert len(adopted.writes) == 10
    taken = Existing(stranger)
    patch, _ = _reconcile(taken)
    assert taken.writes == [] and taken.dry_runs == []
    ready = next(c for c in patch.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == handlers.NAME_CONFLICT
