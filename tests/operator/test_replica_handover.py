"""Turning autoscaling on keeps the running replica count (server-side apply ownership).

kmock stores objects but does not track server-side apply field ownership, so no emulator here
can show a dropped field being reset; this test records the operator's API calls against a
stand-in client and checks the documented handover sequence instead.
"""

import asyncio
import copy

from hedgerow.operator import handlers, names
from hedgerow.operator.spec import parse

BODY = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u", "generation": 2},
    "spec": {
        "model": {"path": "/models/m", "hostPath": {"path": "/srv/models"}},
        "server": {"image": "s:1", "replicas": 4},
        "gateway": {"image": "g:1"},
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8,
                        "targetTokensPerSecond": 50000},
    },
}


def _deployment(managers):
    return {"metadata": {"name": "emb-server", "namespace": "ml", "managedFields": [
        {"manager": manager, "operation": operation,
         "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}}
        for manager, operation in managers]}, "spec": {"replicas": 4}}


class RecordingKube:
    """Records applies as (field manager, manifest)."""

    def __init__(self):
        self.applied = []

    async def apply(self, manifest, field_manager=names.FIELD_MANAGER):
        self.applied.append((field_manager, manifest))
        return manifest


def _handover(live):
    """The handover given the server Deployment as reconcile read it (None: none yet)."""
    kube = RecordingKube()
    asyncio.run(handlers.hand_replicas_to_hpa(kube, parse(BODY), copy.deepcopy(live)))
    return kube.applied


def test_replicas_the_operator_owned_are_held_by_a_second_manager_first():
    applied = _handover(_deployment([(names.FIELD_MANAGER, "Apply")]))
    assert len(applied) == 1
    manager, manifest = applied[0]
    assert manager == names.HANDOVER_MANAGER
    assert manifest["spec"] == {"replicas": 4}
    assert manifest["metadata"] == {"name": "emb-server", "namespace": "ml"}


def test_nothing_to_hand_over_once_the_hpa_or_nobody_owns_them():
    assert _handover(_deployment([("kube-controller-manager", "Update")])) == []
    assert _handover(_deployment([(names.HANDOVER_MANAGER, "Apply")])) == []
    assert _handover(None) == []  # no Deployment yet: created without replicas
