"""What the server's interfaces share while it runs: settings, metrics, engine, loop, space.

`ServerState` starts with no engine (the model is loading) and gains one, plus its scheduling
loop, the engine thread they share and the measured embedding space (its fingerprint, the
facts behind it, the golden-set check), when loading finishes. The gRPC service and the HTTP
endpoints read it; only `app.py` writes it. `warmup_report()` is this server's side of the
/warmup contract (hedgerow.warmup_report, which also says what "warm" means) and
`warmup_status()` its body, with the engine's graph-cache detail, the step shapes this server
ran and the facts its fingerprint digests. Knows nothing about gRPC or HTTP.
"""

from dataclasses import dataclass
from typing import Any

from hedgerow.server.loop import EmbedLoop
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server_settings import ServerSettings
from hedgerow.server.space import Space
from hedgerow.warmup_report import GoldenCheck, WarmupReport, from_engine


@dataclass(eq=False)
class ServerState:
    settings: ServerSettings
    metrics: ServerMetrics
    engine: Any = None             # hedgerow.engine.engine.Engine once loaded
    loop: EmbedLoop | None = None  # set together with the engine
    engine_thread: Any = None      # the loop's EngineThread: device work (Score on CUDA) runs there
    serving: bool = False          # health says SERVING (loaded, warm, not shutting down)
    load_error: str | None = None
    active_calls: int = 0          # Embed/Score handlers running (not health watches)
    space: Space | None = None     # set with the engine
    golden: GoldenCheck | None = None  # the golden-set check, with --golden-set
    # EmbedResponse's `space` field as bytes, written once and appended to every answer.
    space_field: bytes = b""


def warmup_report(state: ServerState) -> WarmupReport:
    """The contract's fields: loading (or why it failed), or the engine's hot-set counts."""
    if state.engine is None:
        return WarmupReport(loaded=False, serving=state.serving, error=state.load_error)
    return from_engine(state.engine.warmup_report(), serving=state.serving,
                       space=state.space.fingerprint if state.space else None,
                       golden=state.golden, failed=state.loop.failed if state.loop else None)


def warmup_status(state: ServerState) -> dict[str, Any]:
    """JSON-ready /warmup body: the contract's fields, plus the engine's report (graph cache:
    configurations seen, graph memory, ...), the steps this server ran and how many distinct
    (sequences, tokens) step shapes they had."""
    details: dict[str, Any] = {}
    if state.engine is not None:
        loop = state.loop
        details = {**state.engine.warmup_report(), "steps": loop.steps if loop else 0,
                   "step_shapes_seen": len(loop.shapes) if loop else 0,
                   "space_facts": state.space.facts if state.space else None}
    return warmup_report(state).body(details)
