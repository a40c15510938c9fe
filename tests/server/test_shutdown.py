"""Start and stop: health follows loading, and SIGTERM drains admitted work before exit 0."""

import asyncio
import socket
import threading
import urllib.request
import json

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.server.app import StoppedWhileLoading, load_engine, serve
from hedgerow.server.convert import decode_embeddings
from hedgerow.server_settings import ServerSettings
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.conftest import free_port
from tests.server.conftest import embed_request

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def long_request(seed: int) -> list[list[int]]:
    return [[101] + [2000 + seed + i] * 254 + [102] for i in range(8)]


def test_sigterm_drains_in_flight_work_then_exits_zero(start_server):
    server = start_server("--cpu-threads", "1", "--max-batch-tokens", "256",
                          "--shutdown-grace", "120")
    requests = [long_request(100 * r) for r in range(4)]  # 8192 tokens: seconds of CPU work

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            calls = [asyncio.ensure_future(stub.Embed(embed_request(seqs), timeout=300))
                     for seqs in requests]
            while not _all_admitted_and_started(server, 4 * 8 * 256):
                await asyncio.sleep(0.02)
            server.proc.send_signal(15)             # SIGTERM
            await asyncio.sleep(0.2)
            health = await asyncio.to_thread(server.health)
            try:
                await stub.Embed(embed_request([[101, 7592, 102]]), timeout=30)
            except grpc.aio.AioRpcError as error:
                late = error
            else:
                late = None
            return await asyncio.gather(*calls), health, late

    responses, health, late = asyncio.run(main())
    assert [list(r.shape) for r in responses] == [[8, 384]] * 4
    assert all(np.isfinite(decode_embeddings(r)).all() for r in responses)
    assert health in (NOT_SERVING, None), "health still SERVING after SIGTERM"
    assert late is not None and late.code() == grpc.StatusCode.UNAVAILABLE
    assert server.proc.wait(120) == 0
    log = server.log_text()
    assert "event=server.draining" in log and "drained=True" in log


def _all_admitted_and_started(server, tokens: int) -> bool:
    """Every admitted token is either waiting in the pool or was handed to the engine.

    The counter is read before the gauge: a batch formed between the two reads makes the sum
    smaller, never larger, so reaching `tokens` proves every request was admitted (a SIGTERM
    before the last one arrived would rightly refuse it).
    """
    handed = server.metric("hedgerow_server_tokens_total")
    waiting = server.metric("hedgerow_server_pool_tokens")
    return handed > 0 and handed + waiting == tokens


def test_an_open_health_watch_does_not_hold_an_idle_shutdown_for_the_grace(start_server):
    """A gateway keeps a grpc.health.v1 Watch stream open on every server; that stream never
    ends on its own, so stopping with the remaining grace always waited all of it."""
    server = start_server("--shutdown-grace", "120")
    with grpc.insecure_channel(server.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        assert next(watch).status == SERVING
        server.proc.send_signal(15)
        assert server.proc.wait(60) == 0  # not the 120 s grace
        assert NOT_SERVING in [reply.status for reply in _until_closed(watch)]
    log = server.log_text()
    seconds = float(log.split("event=server.stopped")[1].split("seconds=")[1].split()[0])
    assert "drained=True" in log and seconds < 60


def _until_closed(stream):
    statuses = []
    try:
        for reply in stream:
            statuses.append(reply)
    except grpc.RpcError:
        pass
    return statuses


def test_health_is_not_serving_until_the_model_is_loaded():
    # In-process: the real app and engine, with the loader held back by an event so the
    # window before the model is loaded can be observed deterministically.
    release = threading.Event()

    def held_loader(settings, gpu_settings, golden):
        release.wait(120)
        return load_engine(settings, gpu_settings, golden)

    settings = ServerSettings(host="127.0.0.1", port=free_port(), http_port=free_port(),
                              shutdown_grace=5.0, host_cpu="off",  # leave this process's
                              cpu_threads=torch.get_num_threads())  # CPUs and threads as they are
    address = f"127.0.0.1:{settings.port}"

    def warmup() -> dict:
        url = f"http://127.0.0.1:{settings.http_port}/warmup"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    async def check(health) -> int:
        for _ in range(600):
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                return reply.status
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        raise AssertionError("the server never answered health checks")

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(serve(settings, stop=stop, loader=held_loader))
        async with grpc.aio.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = embed_pb2_grpc.EmbedderStub(channel)
            before = await check(health)
            with pytest.raises(grpc.aio.AioRpcError) as embed_error:
                await stub.Embed(embed_request([[101, 7592, 102]]), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as info_error:
                await stub.Info(embed_pb2.InfoRequest(), timeout=10)
            warm_before = await asyncio.to_thread(warmup)
            release.set()
            while (after := await check(health)) != SERVING:
                await asyncio.sleep(0.05)
            response = await stub.Embed(embed_request([[101, 7592, 102]]), timeout=30)
            warm_after = await asyncio.to_thread(warmup)
        stop.set()
        return before, embed_error.value, info_error.value, warm_before, after, response, \
            warm_after, await task

    before, embed_error, info_error, warm_before, after, response, warm_after, code = \
        asyncio.run(main())
    assert before == NOT_SERVING
    assert embed_error.code() == grpc.StatusCode.UNAVAILABLE
    assert "still loading" in embed_error.details()
    assert info_error.code() == grpc.StatusCode.UNAVAILABLE
    assert warm_before["loaded"] is False and warm_before["serving"] is False
    assert "error" not in warm_before and warm_before["space"] is None
    assert after == SERVING
    assert list(response.shape) == [1, 384]
    assert warm_after["loaded"] is True and warm_after["serving"] is True
    assert warm_after["space"] == response.space and response.space.startswith("s1-")
    assert code == 0


def test_a_stop_while_the_model_loads_ends_serve_without_waiting_for_the_load():
    # In-process, the loader held back: serve() must return control (StoppedWhileLoading, on
    # which `hedgerow server` exits at once) while the load is still running on its thread.
    release, finished = threading.Event(), threading.Event()

    def held_loader(settings, gpu_settings, golden):
        release.wait(120)
        finished.set()

    settings = ServerSettings(host="127.0.0.1", port=free_port(), http_port=free_port(),
                              host_cpu="off", cpu_threads=torch.get_num_threads())

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(serve(settings, stop=stop, loader=held_loader))
        await asyncio.sleep(0.5)
        stop.set()
        with pytest.raises(StoppedWhileLoading):
            await asyncio.wait_for(task, 30)
        return finished.is_set()

    try:
        assert asyncio.run(main()) is False  # serve ended while the load was still going
    finally:
        release.set()


def test_a_model_that_fails_to_load_exits_2_with_one_line(start_server, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    server = start_server("--model", str(tmp_path), wait=False)
    assert server.proc.wait(60) == 2
    log = server.log_text()
    assert "hedgerow server: error: unsupported architecture" in log
    assert "Traceback" not in log


def test_a_grpc_port_in_use_exits_2_with_one_line(start_server):
    with socket.socket() as taken:  # without SO_REUSEPORT, which gRPC's own listeners set
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = start_server("--port", str(port), wait=False)
        assert server.proc.wait(60) == 2
    log = server.log_text()
    assert f"cannot listen for gRPC on 127.0.0.1:{port}: Address already in use" in log
    assert "Traceback" not in log


def test_a_second_server_on_a_taken_grpc_port_exits_2_instead_of_sharing_it(start_server):
    first = start_server()
    second = start_server("--port", str(first.port), wait=False)
    assert second.proc.wait(60) == 2
    log = second.log_text()
    assert f"cannot listen for gRPC on 127.0.0.1:{first.port}" in log
    assert "Traceback" not in log


def test_a_host_that_does_not_resolve_exits_2_with_one_line(start_server):
    server = start_server("--host", "999.1.1.1", wait=False)
    assert server.proc.wait(60) == 2
    log = server.log_text()
    assert "hedgerow server: error: --host 999.1.1.1: cannot resolve it" in log
    assert "Traceback" not in log and "add_port" not in log


def test_an_address_this_machine_does_not_have_exits_2_with_one_line(start_server):
    server = start_server("--host", "192.0.2.7", wait=False)  # TEST-NET-1: on no machine
    assert server.proc.wait(60) == 2
    log = server.log_text()
    assert (f"hedgerow server: error: cannot listen for gRPC on 192.0.2.7:{server.port}: "
            "Cannot assign requested address") in log
    assert "Traceback" not in log and "add_port" not in log and "port in use" not in log


def test_the_server_listens_on_an_ipv6_host(start_server):
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this machine")
    server = start_server("--host", "::1", wait=False)
    server.address = f"[::1]:{server.port}"
    server.wait_serving()
    assert f"grpc=[::1]:{server.port}" in server.log_path.read_text()
