"""Engines that fail on cue, passed to the real server app through its loader seam.

Test-only fault injection: nothing here is reachable from a flag or a variable of
`hedgerow server`; a test builds the server with `serve(settings, loader=...)` itself.

`StandInEngine` is a tiny engine without weights (row of a sequence: its length, the sum
and first of its ids, 1, float32 [B, WIDTH]); `Faulty` wraps any engine (the stand-in, or the
real packaged model) and, once `mode` is set, makes its steps raise a sticky CUDA error
(`"sticky"`), raise a plain error that a probe batch repeats (`"broken"`), or answer rows that
raise nothing and are wrong (`"drift"`). A sequence holding `bad_token` raises on its own,
as an input the engine cannot take would.

Run as `python -P faulty_engine.py GRPC_PORT HTTP_PORT TRIGGER_FILE`: a real server of the
packaged model on loopback whose engine turns sticky once TRIGGER_FILE exists.
"""

import asyncio
import os
import sys
from pathlib import Path

import torch

from hedgerow.engine.engine import ModelInfo
from hedgerow.engine.lazy import LazyTensor
from hedgerow.server.space import Space

WIDTH = 4
STICKY_MESSAGE = ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
                  "might be asynchronously reported at some other API call")
STAND_IN_SPACE = Space(fingerprint="s1-00000000-00000000", facts={})


class StandInEngine:
    info = ModelInfo(name="stand-in", architecture="bert", dimensions=WIDTH, max_tokens=512,
                     vocab_size=30522, pooling="mean", normalize=True)

    def warmup(self) -> None:
        pass

    def warmup_report(self) -> dict:
        return {}

    def step(self, batch):
        cu = batch.cu_seqlens.tolist()
        rows = [[float(b - a), float(batch.input_ids[a:b].sum()), float(batch.input_ids[a]), 1.0]
                for a, b in zip(cu[:-1], cu[1:])]
        return LazyTensor.completed(torch.tensor(rows))


class Faulty:
    """`engine`, failing as `mode` says (None: not at all), and on sequences with `bad_token`."""

    def __init__(self, engine, mode: str | None = None, bad_token: int | None = None,
                 trigger: Path | None = None) -> None:
        self.engine = engine
        self.mode = mode
        self.bad_token = bad_token
        self.trigger = trigger  # when this file exists, mode becomes "sticky"
        self.steps = 0

    def __getattr__(self, name):  # info, warmup, warmup_report, ... as the engine has them
        return getattr(self.engine, name)

    def step(self, batch):
        self.steps += 1
        if self.trigger is not None and self.trigger.exists():
            self.mode = "sticky"
        if self.mode == "sticky":
            raise RuntimeError(STICKY_MESSAGE)
        if self.mode == "broken":
            raise RuntimeError("cuBLAS failed for a reason this server cannot name")
        if self.bad_token is not None and bool((batch.input_ids == self.bad_token).any()):
            raise ValueError(f"token {self.bad_token} cannot be embedded")
        result = self.engine.step(batch)
        if self.mode == "drift":
            return LazyTensor.completed(-result.synchronize())
        return result


def main() -> int:
    from hedgerow.server.app import load_engine, serve
    from hedgerow.server_settings import ServerSettings

    grpc_port, http_port, trigger = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    settings = ServerSettings(host="127.0.0.1", port=grpc_port, http_port=http_port,
                              dtype="float32", host_cpu="off", cpu_threads=1)

    def loader(settings, gpu_settings, golden):
        engine, space, check = load_engine(settings, gpu_settings, golden)
        return Faulty(engine, trigger=trigger), space, check

    return asyncio.run(serve(settings, loader=loader))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
