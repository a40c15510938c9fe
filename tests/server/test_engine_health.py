"""Engine health through the engine seam: which step errors fail the engine, which fail only
a request, the probe batch, and what health, /livez, /readyz and /warmup then say.

The engines are stand-ins (tests/server/faulty_engine.py) whose steps raise the error class
under test. The loop tests drive EmbedLoop and its EngineThread directly; the last ones run
the real server app (`serve`, real gRPC and HTTP) in process with a stand-in loader.
"""

import asyncio
import json
import threading
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.errors import InvalidInputError, NotReadyError
from hedgerow.server.app import serve
from hedgerow.server.engine_health import Probe, device_fault
from hedgerow.server.engine_thread import EngineThread
from hedgerow.server.loop import EmbedLoop, EngineStepError
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.scheduler import Scheduler
from hedgerow.server_settings import ServerSettings
from hedgerow.wire import embed_pb2_grpc
from tests.conftest import free_port
from tests.server.conftest import embed_request
from tests.server.faulty_engine import STAND_IN_SPACE, STICKY_MESSAGE, Faulty, StandInEngine

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.mark.parametrize("error, sticky", [
    (RuntimeError(STICKY_MESSAGE), True),
    (RuntimeError("CUDA error: uncorrectable ECC error encountered"), True),
    (RuntimeError("CUDA error: device-side assert triggered"), True),
    (RuntimeError("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost."),
     True),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (RuntimeError("CUDA error: invalid argument"), False),  # left to the probe
    (ValueError("token 99 cannot be embedded"), False),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value))
def test_sticky_device_errors_are_told_from_the_rest(error, sticky):
    assert (device_fault(error) is not None) is sticky


class Gated:
    """Holds the engine thread in `step` until `open` is set, so two requests form one batch."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.open = threading.Event()

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, batch):
        assert self.open.wait(30), "the test never opened the gate"
        return self.engine.step(batch)


def make_loop(engine, failures: list) -> EmbedLoop:
    """A loop over `engine` with the probe taken, as the server starts it."""
    threads = EngineThread(depth=1)
    threads.engine = engine
    probe = Probe(StandInEngine.info.vocab_size, 0.99)
    probe.take_reference(engine)
    threads.probe = probe
    return EmbedLoop(threads, Scheduler(64, 8, 1000), ServerMetrics(),
                     on_engine_failed=failures.append)


def submit(loop: EmbedLoop, *sequences: list[int]):
    lengths = [len(s) for s in sequences]
    cu = list(np.cumsum([0, *lengths]))
    return loop.submit(np.asarray([t for s in sequences for t in s], np.int32), cu, lengths,
                       None)


def test_a_sticky_device_error_fails_the_engine_at_once_without_a_probe():
    failures = []

    async def main():
        engine = Faulty(StandInEngine())
        loop = make_loop(engine, failures)
        engine.mode = "sticky"
        steps = engine.steps
        with pytest.raises(EngineStepError, match="illegal memory access"):
            await loop.result(submit(loop, [1001, 1002]))
        probed = engine.steps - steps - 1  # steps past the failed one: none, it was sticky
        with pytest.raises(NotReadyError, match="engine failed .*sticky device error"):
            submit(loop, [1001])
        await loop.close()
        return loop.failed, probed

    failed, probed = asyncio.run(main(), debug=True)
    assert failed.startswith("sticky device error: RuntimeError: CUDA error: an illegal memory")
    assert probed == 0
    assert failures == [failed]


def test_an_error_the_probe_batch_repeats_fails_the_engine():
    failures = []

    async def main():
        engine = Faulty(StandInEngine())
        loop = make_loop(engine, failures)
        engine.mode = "broken"
        with pytest.raises(EngineStepError):
            await loop.result(submit(loop, [1001, 1002]))
        await loop.close()
        return loop.failed

    failed = asyncio.run(main(), debug=True)
    assert "cuBLAS failed" in failed and "the probe batch failed" in failed
    assert failures == [failed]


def test_a_sequence_that_fails_alone_fails_only_its_request():
    failures = []

    async def main():
        engine = Gated(Faulty(StandInEngine(), bad_token=99))
        engine.open.set()
        loop = make_loop(engine, failures)
        engine.open.clear()
        good = submit(loop, [1001, 1002, 1003])
        bad = submit(loop, [1004], [99, 1005])  # its second sequence cannot be embedded
        later = submit(loop, [1006, 1007])
        engine.open.set()
        with pytest.raises(InvalidInputError, match="sequence 1 of this request.*token 99"):
            await loop.result(bad)
        rows = [await loop.result(good), await loop.result(later)]
        after = await loop.result(submit(loop, [1008]))  # the engine serves on
        await loop.close()
        return rows, after, loop.failed

    (good, later), after, failed = asyncio.run(main(), debug=True)
    assert good.tolist() == [[3.0, 3006.0, 1001.0, 1.0]]
    assert later.tolist() == [[2.0, 2013.0, 1006.0, 1.0]]
    assert after.tolist() == [[1.0, 1008.0, 1008.0, 1.0]]
    assert failed is None and failures == []


def test_the_probe_answers_none_while_the_rows_match_and_says_why_when_not():
    engine = Faulty(StandInEngine())
    probe = Probe(StandInEngine.info.vocab_size, 0.99)
    probe.take_reference(engine)
    assert probe.check(engine) is None
    engine.mode = "drift"
    assert "drifted" in probe.check(engine) and "cosine -1.000000" in probe.check(engine)
    engine.mode = "broken"
    assert probe.check(engine).startswith("the probe batch failed: RuntimeError")


# --- the real server app, in process -------------------------------------------------------

def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _serve_and_watch(engine: Faulty, fail, **overrides) -> dict:
    """Serve `engine` until SERVING, call `fail(stub)`, then wait for health NOT_SERVING and
    read what the server says: its health, /livez, /readyz, /warmup."""
    settings = ServerSettings(host="127.0.0.1", port=free_port(), http_port=free_port(),
                              host_cpu="off", **overrides)
    address = f"127.0.0.1:{settings.port}"

    async def status(health) -> int | None:
        try:
            return (await health.Check(health_pb2.HealthCheckRequest(), timeout=2)).status
        except grpc.aio.AioRpcError:
            return None

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(serve(settings, stop=stop,
                                         loader=lambda *_: (engine, STAND_IN_SPACE, None)))
        seen = {}
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                while await status(health) != SERVING:
                    assert not task.done(), task
                    await asyncio.sleep(0.05)
                seen["livez_before"] = await asyncio.to_thread(_get, settings.http_port, "/livez")
                seen["failure"] = await fail(embed_pb2_grpc.EmbedderStub(channel))
                while await status(health) != NOT_SERVING:
                    await asyncio.sleep(0.05)
                stub = embed_pb2_grpc.EmbedderStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as after:
                    await stub.Embed(embed_request([[1001, 1002]]), timeout=10)
                seen["after"] = after.value.code()
            for path in ("/livez", "/readyz", "/warmup"):
                seen[path] = await asyncio.to_thread(_get, settings.http_port, path)
        finally:
            stop.set()
            seen["exit"] = await task
        return seen

    return asyncio.run(main())


def test_a_server_whose_engine_turns_sticky_is_not_serving_and_its_liveness_fails():
    engine = Faulty(StandInEngine())

    async def fail(stub):
        engine.mode = "sticky"
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Embed(embed_request([[1001, 1002]]), timeout=10)
        return error.value.code()

    seen = _serve_and_watch(engine, fail)
    assert seen["livez_before"] == (200, "alive\n")
    assert seen["failure"] == grpc.StatusCode.INTERNAL  # the batch that met the fault
    assert seen["after"] == grpc.StatusCode.UNAVAILABLE  # then: send it elsewhere
    status, body = seen["/livez"]
    assert status == 503 and body.startswith("engine failed: sticky device error")
    assert seen["/readyz"][0] == 503
    warmup = json.loads(seen["/warmup"][1])
    assert warmup["failed"].startswith("sticky device error") and warmup["serving"] is False
    assert seen["exit"] == 0


def test_the_periodic_probe_fails_an_engine_that_answers_wrong_numbers():
    engine = Faulty(StandInEngine())

    async def fail(stub):
        engine.mode = "drift"  # no request: only the probe can notice

    seen = _serve_and_watch(engine, fail, probe_interval=0.05)
    assert seen["/livez"][0] == 503 and "drifted" in seen["/livez"][1]
    assert "below --probe-min-cosine 0.99" in json.loads(seen["/warmup"][1])["failed"]
    assert seen["after"] == grpc.StatusCode.UNAVAILABLE
