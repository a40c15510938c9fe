"""The ModelFetched condition and status.model of an EmbeddingService with spec.model.huggingFace.

Owns what each pod's fetch (the `fetch-model` init container, build_fetch.py) says: running
is Downloading; terminated with exit code 0 is Verified, with the commit from its termination
message (the JSON `hedgerow fetch-model --message-file` writes); terminated otherwise, a
restart after such a failure, or a container the kubelet cannot start (a missing token Secret,
an image that cannot be pulled) is Failed, with the error. Only pods whose fetch asks for the
spec's repository and revision count: a pod of the previous revision, still serving during a
rollout, says nothing about this one. Pure functions of pods as read from the API; knows
nothing about the API client.
"""

import dataclasses
import json
import re
from typing import Any, Iterable, Mapping

from hedgerow import settings
from hedgerow.fetch_settings import COMMIT
from hedgerow.operator.build_fetch import FETCH_CONTAINER
from hedgerow.operator.status import FALSE, MAX_MESSAGE, TRUE, UNKNOWN, condition

MODEL_FETCHED = "ModelFetched"
PENDING = "Pending"
DOWNLOADING = "Downloading"
VERIFIED = "Verified"
FAILED = "Failed"
# Waiting reasons of a container that has simply not started yet.
NOT_STARTED = frozenset({"PodInitializing", "ContainerCreating"})


@dataclasses.dataclass(frozen=True)
class PodFetch:
    pod: str
    state: str  # PENDING, DOWNLOADING, VERIFIED or FAILED
    commit: str | None = None
    message: str = ""


def _asks_for(pod: Mapping[str, Any], hub: Mapping[str, Any]) -> bool:
    """Whether the pod's fetch is for the spec's repository and revision."""
    for container in (pod.get("spec") or {}).get("initContainers") or ():
        if container.get("name") == FETCH_CONTAINER:
            env = {e.get("name"): e.get("value") for e in container.get("env") or ()}
            return (env.get(settings.env_name("repo")) == hub["id"]
                    and env.get(settings.env_name("revision")) == hub["revision"])
    return False


def _outcome(terminated: Mapping[str, Any]) -> dict:
    """The termination message's JSON, or what the kubelet says when there is none."""
    text = (terminated.get("message") or "").strip()
    try:
        record = json.loads(text)
        if isinstance(record, dict):
            return record
    except ValueError:
        pass
    code, reason = terminated.get("exitCode"), terminated.get("reason") or ""
    return {"ok": code == 0, "error": text or f"exit code {code} {reason}".strip()}


def pod_fetch(pod: Mapping[str, Any], hub: Mapping[str, Any]) -> PodFetch | None:
    """What one pod's fetch says; None for a pod that is not fetching this revision."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or not _asks_for(pod, hub):
        return None
    name = meta.get("name", "")
    status = next((s for s in (pod.get("status") or {}).get("initContainerStatuses") or ()
                   if s.get("name") == FETCH_CONTAINER), None)
    if status is None:
        return PodFetch(name, PENDING)
    state, last = status.get("state") or {}, status.get("lastState") or {}
    if "terminated" in state:
        outcome = _outcome(state["terminated"])
        if state["terminated"].get("exitCode") == 0:
            commit = outcome.get("commit")
            return PodFetch(name, VERIFIED, commit if isinstance(commit, str) else None)
        return PodFetch(name, FAILED, message=str(outcome.get("error", "")))
    if "terminated" in last and last["terminated"].get("exitCode") != 0:
        return PodFetch(name, FAILED, message=str(_outcome(last["terminated"]).get("error", "")))
    waiting = state.get("waiting")
    if waiting is not None and waiting.get("reason") not in NOT_STARTED:
        return PodFetch(name, FAILED, message=f"{waiting.get('reason')}: "
                                              f"{waiting.get('message') or ''}".rstrip(": "))
    if "running" in state:
        return PodFetch(name, DOWNLOADING)
    return PodFetch(name, PENDING)


def observe(pods: Iterable[Mapping[str, Any]], hub: Mapping[str, Any]) -> list[PodFetch]:
    return [f for f in (pod_fetch(pod, hub) for pod in pods) if f is not None]


def _commits(fetches: list[PodFetch]) -> list[str]:
    return sorted({f.commit for f in fetches if f.state == VERIFIED and f.commit})


def label(hub: Mapping[str, Any], fetches: list[PodFetch]) -> str:
    """status.model: `id@commit` (the commits, when pods resolved a moving revision to
    several), `id@revision` until a pod has said which commit it is."""
    if re.fullmatch(COMMIT, hub["revision"]):
        return f"{hub['id']}@{hub['revision']}"
    commits = _commits(fetches)
    return f"{hub['id']}@{','.join(commits) if commits else hub['revision']}"


def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def fetched_condition(fetches: list[PodFetch], hub: Mapping[str, Any],
                      generation: int | None) -> dict:
    what = f"{hub['id']} at {hub['revision']!r}"
    if not fetches:
        return condition(MODEL_FETCHED, UNKNOWN, PENDING,
                         f"no pod has started to fetch {what} yet", generation)
    failed = [f for f in fetches if f.state == FAILED]
    if failed:
        return condition(MODEL_FETCHED, FALSE, FAILED, _short(
            f"{len(failed)} of {len(fetches)} pods could not fetch {what}; pod "
            f"{failed[0].pod}: {failed[0].message}"), generation)
    done = sum(f.state == VERIFIED for f in fetches)
    if done < len(fetches):
        busy = next(f.pod for f in fetches if f.state != VERIFIED)
        return condition(MODEL_FETCHED, FALSE, DOWNLOADING,
                         f"{done} of {len(fetches)} pods have fetched {what}; pod {busy} is "
                         "fetching it", generation)
    commits = _commits(fetches)
    return condition(MODEL_FETCHED, TRUE, VERIFIED, _short(
        f"{what} (commit {', '.join(commits) or 'unknown'}) fetched and verified in "
        f"{len(fetches)} pods"), generation)
