"""The /warmup contract between a server and the operator, and the one definition of "warm".

Owns the fields of a server's `GET /warmup` that anything acts on (`loaded`, `serving`,
`hot_set`, `hot_set_captured`, `captured`, `error`), the hot set's coverage, and what "warm"
means: the model is loaded and its hot CUDA graphs are captured, or the server is SERVING
(its warmup returned; a hot-set shape it could not capture, over the graph memory limit or a
failed capture, runs eagerly, slower but correct, so waiting for full coverage would keep it
out of traffic for good). The server builds its report here and the operator parses it here.
The body carries more (graph-cache detail, step counts) for people; nothing acts on that.
Plain data: no torch, no gRPC, no HTTP.
"""

import dataclasses
import json
from typing import Any, Mapping


class WarmupReportError(ValueError):
    """A /warmup body that does not follow the contract; the message says which field."""


def hot_set_coverage(captured: int, hot_set: int) -> float:
    """Share of the hot set captured; an empty hot set is fully covered."""
    return 1.0 if hot_set == 0 else captured / hot_set


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    loaded: bool  # the model is loaded and the engine exists
    serving: bool = False  # health SERVING: warmup has returned and not shutting down
    hot_set: int = 0  # configurations to capture before serving
    hot_set_captured: int = 0
    captured: int = 0  # graphs captured so far, hot set or lazily
    error: str | None = None  # why loading failed, when it did

    @property
    def coverage(self) -> float:
        return hot_set_coverage(self.hot_set_captured, self.hot_set)

    @property
    def hot_set_complete(self) -> bool:
        return self.hot_set_captured >= self.hot_set

    @property
    def warm(self) -> bool:
        return self.loaded and (self.hot_set_complete or self.serving)

    def describe(self) -> str:
        if self.error:
            return f"model failed to load: {self.error}"[:300]
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
        if self.error is None:
            del out["error"]
        return out


def from_engine(engine_report: Mapping[str, Any], *, serving: bool) -> WarmupReport:
    """The report of a loaded engine, from its own counters (Engine.warmup_report)."""
    return WarmupReport(loaded=True, serving=serving,
                        hot_set=int(engine_report.get("hot_set", 0)),
                        hot_set_captured=int(engine_report.get("hot_set_captured", 0)),
                        captured=int(engine_report.get("captured", 0)))


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
    error = data.get("error")
    return WarmupReport(loaded=data["loaded"], serving=data.get("serving", False),
                        error=str(error) if error else None, **counts)
