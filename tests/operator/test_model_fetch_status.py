"""What a pod's fetch init container says (operator/model_fetch_status.py), state by state,
and the ModelFetched condition and status.model made of them."""

import json

import pytest

from hedgerow.operator import build_fetch
from hedgerow.operator.model_fetch_status import (
    DOWNLOADING, FAILED, PENDING, VERIFIED, PodFetch, fetched_condition, label, pod_fetch,
)

HUB = {"id": "BAAI/bge-m3", "revision": "v2"}
COMMIT = "5617a9f61b028005a4858fdac845db406aefb181"


def _pod(status: dict | None, revision: str = "v2", **metadata) -> dict:
    init = {"name": build_fetch.FETCH_CONTAINER, "env": [
        {"name": "HEDGEROW_REPO", "value": "BAAI/bge-m3"},
        {"name": "HEDGEROW_REVISION", "value": revision}]}
    pod = {"metadata": {"name": "p", **metadata}, "spec": {"initContainers": [init]},
           "status": {}}
    if status is not None:
        pod["status"]["initContainerStatuses"] = [{"name": build_fetch.FETCH_CONTAINER,
                                                   **status}]
    return pod


def _done(code: int, message: str | dict, reason: str = "") -> dict:
    text = message if isinstance(message, str) else json.dumps(message)
    return {"exitCode": code, "message": text, "reason": reason}


@pytest.mark.parametrize("status, expected", [
    (None, PodFetch("p", PENDING)),
    ({"state": {"waiting": {"reason": "PodInitializing"}}}, PodFetch("p", PENDING)),
    ({"state": {"running": {}}}, PodFetch("p", DOWNLOADING)),
    ({"state": {"terminated": _done(0, {"ok": True, "commit": COMMIT})}},
     PodFetch("p", VERIFIED, COMMIT)),
    ({"state": {"terminated": _done(2, {"ok": False, "error": "revision 'v2' is not"})}},
     PodFetch("p", FAILED, message="revision 'v2' is not")),
    ({"state": {"waiting": {"reason": "CrashLoopBackOff"}},
      "lastState": {"terminated": _done(2, {"ok": False, "error": "HTTP 401"})}},
     PodFetch("p", FAILED, message="HTTP 401")),
    ({"state": {"terminated": _done(137, "", "OOMKilled")}},
     PodFetch("p", FAILED, message="exit code 137 OOMKilled")),
    ({"state": {"waiting": {"reason": "CreateContainerConfigError",
                            "message": 'secret "hf-token" not found'}}},
     PodFetch("p", FAILED, message='CreateContainerConfigError: secret "hf-token" not found')),
])
def test_each_state_of_the_fetch_container(status, expected):
    assert pod_fetch(_pod(status), HUB) == expected


def test_pods_of_another_revision_or_going_away_say_nothing():
    assert pod_fetch(_pod({"state": {"running": {}}}, revision="v1"), HUB) is None
    assert pod_fetch(_pod(None, deletionTimestamp="2026-01-01T00:00:00Z"), HUB) is None
    assert pod_fetch({"metadata": {"name": "p"}, "spec": {}}, HUB) is None


def test_the_condition_and_the_model_label():
    assert fetched_condition([], HUB, 3)["status"] == "Unknown"
    verified = PodFetch("a", VERIFIED, COMMIT)
    busy = fetched_condition([verified, PodFetch("b", DOWNLOADING)], HUB, 3)
    assert (busy["status"], busy["reason"]) == ("False", "Downloading")
    assert busy["message"] == "1 of 2 pods have fetched BAAI/bge-m3 at 'v2'; pod b is fetching it"
    failed = fetched_condition([verified, PodFetch("b", FAILED, message="x" * 5000)], HUB, 3)
    assert failed["reason"] == "Failed" and len(failed["message"]) <= 1024
    done = fetched_condition([verified], HUB, 3)
    assert (done["status"], done["reason"], done["observedGeneration"]) == ("True", "Verified", 3)
    assert label(HUB, []) == "BAAI/bge-m3@v2"
    assert label(HUB, [verified]) == f"BAAI/bge-m3@{COMMIT}"
    assert label({**HUB, "revision": COMMIT}, []) == f"BAAI/bge-m3@{COMMIT}"
    moved = PodFetch("b", VERIFIED, "f" * 40)
    assert label(HUB, [verified, moved]) == f"BAAI/bge-m3@{COMMIT},{'f' * 40}"
