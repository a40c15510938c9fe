"""What the server's interfaces share while it runs: settings, metrics, engine, loop.

`ServerState` starts with no engine (the model is loading) and gains one, plus its scheduling
loop and the engine thread they share, when loading finishes. The gRPC service and the HTTP
endpoints read it; only `app.py` writes it. `warmup_status()` is the /warmup body: the
engine's own warmup report (`Engine.warmup_report()`, the GPU engine's graph cache) plus the
step shapes this server ran.
Knows nothing about gRPC or HTTP.
"""

from dataclasses import dataclass
from typing import Any

from hedgerow.server.loop import EmbedLoop
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.settings import ServerSettings


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


def engine_warmup_report(engine: Any) -> dict[str, Any]:
    """The engine's warmup report (graph cache state; trivially warm on CPU)."""
    return dict(engine.warmup_report())


def is_warm(engine: Any) -> bool:
    """True when the engine has no hot set to capture, or has captured all of it."""
    return float(engine_warmup_report(engine).get("coverage", 1.0)) >= 1.0


def warmup_status(state: ServerState) -> dict[str, Any]:
    """JSON-ready warmup state: the engine's report (loaded, configurations seen, captured,
    hot-set coverage, graph memory), plus the steps this server ran and how many distinct
    (sequences, tokens) step shapes they had."""
    status: dict[str, Any] = {"loaded": False, "serving": state.serving}
    if state.load_error is not None:
        status["error"] = state.load_error
    if state.engine is None:
        return status
    status.update(engine_warmup_report(state.engine))
    loop = state.loop
    status["steps"] = loop.steps if loop else 0
    status["step_shapes_seen"] = len(loop.shapes) if loop else 0
    status["loaded"] = True
    return status
