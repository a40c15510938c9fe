"""The CUDA-graph cache: what state each configuration's graph is in, and what a step does.

A configuration is `(seq_slots, token_bucket)` on the bucket grid that `hedgerow.graph_grid`
owns (the arithmetic lives there so the settings and the operator share it), or a uniform
configuration off the grid (`S` sequences of one length) that the engine asks for by name.
Each configuration moves cold -> warm (first hit runs eagerly, warming kernels and workspaces at the static shapes)
-> captured (second hit captures, then replays; every later hit replays). A capture that fails
marks the configuration `failed` (eager from then on, with a message that says what to change);
a capture that would pass the graph-memory limit marks it `over_budget` (eager). Batches past
the grid run eagerly without padding.

This module is plain CPU code: it owns the state machine, the counters and the report, and
knows nothing about tensors, CUDA or models. The work itself is done by a `GraphBackend` (the
CUDA one lives in `gpu.py`; the tests use a fake), so the whole state machine is tested on a
machine with no GPU. One thread calls it (the engine's step loop).
"""

import dataclasses
import enum
import logging
import time
from typing import Any, Callable, Iterable, Protocol

from hedgerow.graph_grid import Config, GraphGrid
from hedgerow.logs import fields
from hedgerow.progress import bar
from hedgerow.warmup_report import hot_set_coverage

log = logging.getLogger(__name__)


class State(enum.Enum):
    COLD = "cold"
    WARM = "warm"
    CAPTURED = "captured"
    FAILED = "failed"
    OVER_BUDGET = "over_budget"


class Action(enum.Enum):
    """What one step does: run eagerly, capture then replay, or replay."""

    EAGER = "eager"
    CAPTURE = "capture"
    REPLAY = "replay"


class CaptureError(Exception):
    """A backend could not capture a configuration; the message says what to change."""


class GraphBackend(Protocol):
    """The device side the cache drives. `feed` is whatever the backend needs for one batch."""

    def run_eager(self, config: Config | None, feed: Any) -> Any:
        """Run the forward pass eagerly; at the config's static shapes, or unpadded if None."""

    def capture(self, config: Config) -> int:
        """Capture the config's graph from its static buffers; return the bytes it added."""

    def replay(self, config: Config, feed: Any) -> Any:
        """Load `feed` into the config's static buffers and replay its graph."""

    def warmup_feed(self, config: Config) -> Any:
        """A valid batch for `config`, used to warm and capture the hot set."""


@dataclasses.dataclass
class _Entry:
    state: State = State.COLD
    hits: int = 0
    replays: int = 0
    capture_seconds: float = 0.0
    memory_bytes: int = 0
    message: str = ""


class GraphCache:
    """Lazy graph capture per configuration, an eager fallback, counters and a report."""

    def __init__(
        self,
        grid: GraphGrid,
        backend: GraphBackend,
        *,
        hot_set: Iterable[Config] = (),
        memory_limit_bytes: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.grid = grid
        self.backend = backend
        self.hot_set = list(hot_set)
        self.memory_limit_bytes = memory_limit_bytes
        self._clock = clock
        self._entries: dict[Config, _Entry] = {}
        self.loaded = False
        self.eager_runs = 0
        self.eager_past_grid = 0
        self.replays = 0
        self.captures = 0
        self.capture_seconds = 0.0
        self.memory_bytes = 0

    def reset(self) -> None:
        """Forget every configuration's state (the backend dropped its graphs); counters of
        past work stay."""
        self._entries.clear()
        self.memory_bytes = 0

    # -- queries ---------------------------------------------------------------------------

    def can_run(self, num_seqs: int, num_tokens: int) -> bool:
        """True when a batch of this shape has a configuration on the grid (not eager)."""
        return self.grid.config_for(num_seqs, num_tokens) is not None

    def state(self, config: Config) -> State:
        entry = self._entries.get(config)
        return State.COLD if entry is None else entry.state

    def can_take(self, config: Config) -> bool:
        """Whether a hit of `config` would replay or could still be captured: not failed, not
        over budget, and (unless captured) the graph memory has room. Lets the engine fall back
        to a grid configuration instead of running an off-grid one eagerly."""
        state = self.state(config)
        if state is State.CAPTURED:
            return True
        return state in (State.COLD, State.WARM) and self._has_budget()

    def plan(self, config: Config | None) -> Action:
        """What the next hit of `config` will do, without doing it."""
        if config is None:
            return Action.EAGER
        state = self.state(config)
        if state is State.CAPTURED:
            return Action.REPLAY
        if state is State.WARM and self._has_budget():
            return Action.CAPTURE
        return Action.EAGER

    # -- the step ----------------------------------------------------------------------------

    def run(self, num_seqs: int, num_tokens: int, feed: Any) -> Any:
        """Run one batch through its configuration's current state and advance the state."""
        config = self.grid.config_for(num_seqs, num_tokens)
        if config is None:
            self.eager_runs += 1
            self.eager_past_grid += 1
            return self.backend.run_eager(None, feed)
        return self.run_config(config, feed)

    def run_config(self, config: Config, feed: Any) -> Any:
        entry = self._entries.setdefault(config, _Entry())
        entry.hits += 1
        if entry.state is State.COLD:
            entry.state = State.WARM
            self.eager_runs += 1
            return self.backend.run_eager(config, feed)
        if entry.state is State.WARM:
            if not self._has_budget():
                entry.state = State.OVER_BUDGET
                entry.message = self._budget_message()
                log.warning("%s", fields(event="graph.over_budget", config=str(config)))
            elif self._capture(config, entry):
                return self._replay(config, entry, feed)
        if entry.state is State.CAPTURED:
            return self._replay(config, entry, feed)
        self.eager_runs += 1
        return self.backend.run_eager(config, feed)

    def warmup(self) -> None:
        """Warm and capture every hot-set configuration (eager run, then capture).

        Logs one line per configuration (`done` of `total`, its state, seconds), so a slow
        start-up (the first configuration also pays for torch.compile) shows how far along it is.
        """
        total = len(self.hot_set)
        with bar(total, "capturing CUDA graphs", unit="graph") as progress:
            for done, config in enumerate(self.hot_set, start=1):
                start = self._clock()
                self._warm_one(config)
                log.info("%s", fields(event="graph.warmup", config=str(config), done=done,
                                      total=total, state=self._entries[config].state.value,
                                      seconds=self._clock() - start))
                progress.update()

    def _warm_one(self, config: Config) -> None:
        entry = self._entries.setdefault(config, _Entry())
        if entry.state is State.CAPTURED:
            return
        feed = self.backend.warmup_feed(config)
        if entry.state is State.COLD:
            self.backend.run_eager(config, feed)
            entry.state = State.WARM
        if entry.state is State.WARM:
            if not self._has_budget():
                entry.state = State.OVER_BUDGET
                entry.message = self._budget_message()
                return
            if self._capture(config, entry):
                self.backend.replay(config, feed)

    def _capture(self, config: Config, entry: _Entry) -> bool:
        start = self._clock()
        try:
            added = self.backend.capture(config)
        except CaptureError as error:
            entry.state = State.FAILED
            entry.message = str(error)
            log.warning("%s", fields(event="graph.capture_failed", config=str(config),
                                     error=str(error)))
            return False
        seconds = self._clock() - start
        entry.state = State.CAPTURED
        entry.capture_seconds = seconds
        entry.memory_bytes = added
        self.captures += 1
        self.capture_seconds += seconds
        self.memory_bytes += added
        log.debug("%s", fields(event="graph.captured", config=str(config), seconds=seconds,
                               bytes=added))
        return True

    def _replay(self, config: Config, entry: _Entry, feed: Any) -> Any:
        entry.replays += 1
        self.replays += 1
        return self.backend.replay(config, feed)

    def _has_budget(self) -> bool:
        return self.memory_limit_bytes is None or self.memory_bytes < self.memory_limit_bytes

    def _budget_message(self) -> str:
        return (
            f"graph memory {self.memory_bytes} bytes reached the limit "
            f"{self.memory_limit_bytes}; raise --graph-memory-limit-mib or shrink the grid "
            "(--graph-max-tokens, --graph-max-seqs)"
        )

    # -- reporting ---------------------------------------------------------------------------

    def table(self) -> list[dict[str, Any]]:
        """One row per configuration seen or warmed, sorted by (seq_slots, tokens)."""
        rows = []
        for config in sorted(self._entries):
            entry = self._entries[config]
            rows.append({
                "seq_slots": config.seq_slots,
                "tokens": config.tokens,
                "uniform": config.uniform,
                "state": entry.state.value,
                "hits": entry.hits,
                "replays": entry.replays,
                "capture_ms": round(entry.capture_seconds * 1e3, 3),
                "memory_bytes": entry.memory_bytes,
                "message": entry.message,
            })
        return rows

    def counts_by_state(self) -> dict[str, int]:
        """Configurations per state; `cold` counts the grid's configurations not yet seen (the
        uniform ones, off the grid, count once seen)."""
        counts = {state.value: 0 for state in State}
        on_grid_seen = 0
        for config, entry in self._entries.items():
            counts[entry.state.value] += 1
            on_grid_seen += not config.uniform and entry.state is not State.COLD
        counts[State.COLD.value] = self.grid.size() - on_grid_seen
        return counts

    def report(self) -> dict[str, Any]:
        """The warmup report the server's /warmup endpoint and metrics read."""
        hot_captured = sum(1 for c in self.hot_set if self.state(c) is State.CAPTURED)
        steps = self.replays + self.eager_runs
        return {
            "loaded": self.loaded,
            "configurations_seen": sum(1 for e in self._entries.values() if e.hits),
            "captured": self.captures,
            "hot_set": len(self.hot_set),
            "hot_set_captured": hot_captured,
            "coverage": hot_set_coverage(hot_captured, len(self.hot_set)),
            "graph_memory_bytes": self.memory_bytes,
            "graph_memory_limit_bytes": self.memory_limit_bytes,
            "graphs_by_state": self.counts_by_state(),
            "capture_seconds_total": round(self.capture_seconds, 6),
            "replays": self.replays,
            "eager_runs": self.eager_runs,
            "eager_past_grid": self.eager_past_grid,
            "replay_share": 0.0 if steps == 0 else self.replays / steps,
            "grid": {
                "token_buckets": len(self.grid.token_buckets()),
                "seq_slot_counts": len(self.grid.seq_slot_counts()),
                "configurations": self.grid.size(),
                "max_tokens": self.grid.max_tokens,
                "max_seqs": self.grid.max_seqs,
            },
        }
