"""The /warmup contract between a server and the operator, and the one definition of "warm".

Owns the fields of a server's `GET /warmup` that anything acts on (`loaded`, `serving`,
`hot_set`, `hot_set_captured`, `captured`, `error`, `failed`, `space`, `golden`), the hot set's
coverage, what "warm" means: the engine has not failed (`failed`: why it did, a sticky device
error or a failed probe), the model is loaded and its hot CUDA graphs are captured, or the server is
SERVING (its warmup returned; a hot-set shape it could not capture, over the graph memory limit
or a failed capture, runs eagerly, slower but correct, so waiting for full coverage would keep
it out of traffic for good); and whether a server's space matches its golden set
(`space_verdict`: the smallest cosine of its vectors, dense or sparse, to the golden set's at
least the minimum; for a cross-encoder's pairs, every score within the largest difference of
its recorded one and no two documents of one query whose recorded scores lie further apart
ranked the other way; for a golden set of a fingerprint alone, the same fingerprint). The
server builds its report here and the operator parses and judges it here. The body carries
more (graph-cache detail, step counts, the facts behind the fingerprint) for people; nothing
acts on that.
Plain data: no torch, no gRPC, no HTTP.
"""

import dataclasses
import json
import math
from typing import Any, Mapping

from hedgerow import space as space_format
from hedgerow.golden_set import DEFAULT_MAX_SCORE_DELTA, TASKS


class WarmupReportError(ValueError):
    """A /warmup body that does not follow the contract; the message says which field."""


def hot_set_coverage(captured: int, hot_set: int) -> float:
    """Share of the hot set captured; an empty hot set is fully covered."""
    return 1.0 if hot_set == 0 else captured / hot_set


@dataclasses.dataclass(frozen=True)
class GoldenCheck:
    """What a server measured against its golden set, at start."""

    fingerprint: str  # the fingerprint the golden set was recorded in
    texts: int  # texts (task rerank: pairs) in the golden set
    # smallest cosine to the recorded vectors (dense, or sparse over the union of their
    # indices); None: it has none, or is of task rerank
    min_cosine: float | None = None
    problem: str | None = None  # why the set could not be checked here (then: no match)
    task: str = "embed"  # the golden set's task (a report without one predates the others)
    # task rerank, with recorded scores: the largest |score - recorded| over the pairs, and
    # the largest recorded gap between two documents of one query ranked the other way (0.0:
    # every query kept its order); see golden_set.score_drift
    max_score_delta: float | None = None
    max_flipped_gap: float | None = None


@dataclasses.dataclass(frozen=True)
class SpaceVerdict:
    """Whether a server's space matches its golden set; `matches` None: not checked."""

    matches: bool | None
    message: str
    min_cosine: float | None = None
    max_score_delta: float | None = None


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    loaded: bool  # the model is loaded and the engine exists
    serving: bool = False  # health SERVING: warmup has returned and not shutting down
    hot_set: int = 0  # configurations to capture before serving
    hot_set_captured: int = 0
    captured: int = 0  # graphs captured so far, hot set or lazily
    error: str | None = None  # why loading failed, when it did
    failed: str | None = None  # why the loaded engine failed (it serves no more), when it did
    space: str | None = None  # the fingerprint of this server's space, once loaded
    golden: GoldenCheck | None = None  # the golden-set check, when one was configured

    @property
    def coverage(self) -> float:
        return hot_set_coverage(self.hot_set_captured, self.hot_set)

    @property
    def hot_set_complete(self) -> bool:
        return self.hot_set_captured >= self.hot_set

    @property
    def warm(self) -> bool:
        return self.loaded and not self.failed and (self.hot_set_complete or self.serving)

    def describe(self) -> str:
        if self.error:
            return f"model failed to load: {self.error}"[:300]
        if self.failed:
            return f"engine failed: {self.failed}"[:300]
        if not self.loaded:
            return "model loading"
        text = (f"{self.hot_set_captured}/{self.hot_set} hot graphs captured "
                f"(coverage {self.coverage:.2f})")
        if self.serving and not self.hot_set_complete:
            text += (f"; warmup done, {self.hot_set - self.hot_set_captured} run eagerly (graph "
                     "memory limit or a failed capture: see the server's log)")
        return text

    def body(self, details: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON object /warmup answers: `details` for people, then the contract's fields."""
        out = dict(details)
        out.update(dataclasses.asdict(self), coverage=self.coverage)
        for name in ("error", "failed", "golden"):
            if out[name] is None:
                del out[name]
        return out


def space_verdict(report: WarmupReport, minimum: float,
                  max_score_delta: float = DEFAULT_MAX_SCORE_DELTA) -> SpaceVerdict:
    """Judge `report`'s golden-set check against the smallest cosine `minimum` (vectors) and
    the largest score difference `max_score_delta` (a cross-encoder's pairs)."""
    if report.golden is None:
        return SpaceVerdict(None, "the server reports no golden-set check: its image predates "
                                  "the guard, or it was started without --golden-set")
    return judge(report.space, report.golden, minimum, max_score_delta)


def judge(space: str | None, golden: GoldenCheck, minimum: float,
          max_score_delta: float = DEFAULT_MAX_SCORE_DELTA) -> SpaceVerdict:
    """Whether answers of the space `space`, measured against a golden set as `golden`
    says, match it: the smallest cosine at least `minimum`; for a cross-encoder's scores,
    each within `max_score_delta` of its recorded one and no order flipped between documents
    of one query recorded more than `max_score_delta` apart; for a golden set of a fingerprint
    alone, the same fingerprint. One rule for the operator's gate and `hedgerow guard check`."""
    if golden.problem:
        return SpaceVerdict(False, f"the golden set cannot be checked here: {golden.problem}")
    spaces = f"space {space}, golden set recorded in {golden.fingerprint}"
    if golden.max_score_delta is not None:
        return _judge_scores(golden, max_score_delta, spaces)
    if golden.min_cosine is None:
        same = space == golden.fingerprint
        relation = "equal" if same else "differ (the golden set holds no vectors: they must " \
                                        "be equal)"
        return SpaceVerdict(same, f"{spaces}: fingerprints {relation}")
    matches = golden.min_cosine >= minimum
    kind = "sparse vectors" if golden.task == "sparse" else "vectors"
    return SpaceVerdict(matches, f"smallest cosine to the golden set's {golden.texts} {kind} "
                                 f"{golden.min_cosine:.6f} ({'at least' if matches else 'below'} "
                                 f"the minimum {minimum}); {spaces}", golden.min_cosine)


def _judge_scores(golden: GoldenCheck, maximum: float, spaces: str) -> SpaceVerdict:
    delta, flipped = golden.max_score_delta, golden.max_flipped_gap or 0.0
    within = delta <= maximum
    text = (f"largest score difference to the golden set's {golden.texts} pairs {delta:.6f} "
            f"({'within' if within else 'past'} the maximum {maximum})")
    if flipped > maximum:
        text += (f"; documents of one query whose recorded scores lie {flipped:.6f} apart are "
                 "ranked the other way")
    else:
        text += "; every query's order kept"
    return SpaceVerdict(within and flipped <= maximum, f"{text}; {spaces}",
                        max_score_delta=delta)


def from_engine(engine_report: Mapping[str, Any], *, serving: bool, space: str | None = None,
                golden: GoldenCheck | None = None, failed: str | None = None) -> WarmupReport:
    """The report of a loaded engine, from its own counters (Engine.warmup_report), with the
    fingerprint of its space, its golden-set check and why it failed, if it did."""
    return WarmupReport(loaded=True, serving=serving, failed=failed,
                        hot_set=int(engine_report.get("hot_set", 0)),
                        hot_set_captured=int(engine_report.get("hot_set_captured", 0)),
                        captured=int(engine_report.get("captured", 0)), space=space,
                        golden=golden)


def parse_report(raw: bytes) -> WarmupReport:
    """The report in a /warmup body; raises WarmupReportError naming what is malformed."""
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise WarmupReportError(f"/warmup is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise WarmupReportError("/warmup is not a JSON object")
    if "loaded" not in data:
        raise WarmupReportError("/warmup lacks the field 'loaded'")
    for name in ("loaded", "serving"):
        if not isinstance(data.get(name, False), bool):
            raise WarmupReportError(f"/warmup field {name!r} is not a boolean")
    counts = {}
    for name in ("hot_set", "hot_set_captured", "captured"):
        value = data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise WarmupReportError(f"/warmup field {name!r} is not a count: {value!r}")
        counts[name] = value
    error, failed = data.get("error"), data.get("failed")
    fingerprint = data.get("space")
    if fingerprint is not None and not space_format.is_fingerprint(fingerprint):
        raise WarmupReportError(f"/warmup field 'space' is not a fingerprint: {fingerprint!r}")
    return WarmupReport(loaded=data["loaded"], serving=data.get("serving", False),
                        error=str(error) if error else None,
                        failed=str(failed) if failed else None, space=fingerprint,
                        golden=_golden(data.get("golden")), **counts)


def _golden(data: Any) -> GoldenCheck | None:
    """The `golden` object of a /warmup body (absent: no golden set configured)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise WarmupReportError("/warmup field 'golden' is not an object")
    fingerprint, texts = data.get("fingerprint"), data.get("texts")
    if not space_format.is_fingerprint(fingerprint):
        raise WarmupReportError(f"/warmup golden.fingerprint is not a fingerprint: "
                                f"{fingerprint!r}")
    if isinstance(texts, bool) or not isinstance(texts, int) or texts < 0:
        raise WarmupReportError(f"/warmup golden.texts is not a count: {texts!r}")
    numbers = {}
    for name in ("min_cosine", "max_score_delta", "max_flipped_gap"):
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise WarmupReportError(f"/warmup golden.{name} is not a number: {value!r}")
        numbers[name] = None if value is None else float(value)
    task = data.get("task", "embed")
    if task not in TASKS:
        raise WarmupReportError(f"/warmup golden.task is not a task: {task!r}")
    problem = data.get("problem")
    return GoldenCheck(fingerprint=fingerprint, texts=texts, task=task,
                       problem=str(problem) if problem else None, **numbers)
