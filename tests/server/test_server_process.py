"""The real `hedgerow server` process on loopback with the packaged default model.

One server for the module, with small budgets so that batching, admission and deadlines are
exercised by modest traffic: 256-token batches of at most 16 sequences, 8192 tokens in flight,
4096 tokens per request. References come from the engine loaded in this process.
"""

import asyncio
import json
import urllib.error

import grpc
import numpy as np
import pytest
import torch

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.engine.pooling import postprocess
from hedgerow.server.convert import decode_embeddings
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.server.conftest import CLS, SEP, embed_request, sentence

MAX_BATCH_TOKENS, MAX_INFLIGHT, MAX_REQUEST = 256, 8192, 4096


@pytest.fixture(scope="module")
def server(start_server):
    # One torch thread: on a small shared machine more threads than free cores spin.
    return start_server(
        "--cpu-threads", "1", "--max-batch-tokens", str(MAX_BATCH_TOKENS), "--max-batch-seqs", "16",
        "--max-inflight-tokens", str(MAX_INFLIGHT), "--max-request-tokens", str(MAX_REQUEST),
    )


@pytest.fixture(scope="module")
def engine(default_model_dir):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Engine.load(default_model_dir)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield embed_pb2_grpc.EmbedderStub(channel)


def reference(engine, sequences, normalize=True, dimensions=None) -> np.ndarray:
    rows = engine.step(RaggedBatch.from_sequences(sequences)).synchronize()
    return postprocess(rows.numpy(), normalize, dimensions)


def test_info_describes_the_served_model(stub, engine):
    info = stub.Info(embed_pb2.InfoRequest(), timeout=60)
    assert info.dimensions == engine.info.dimensions == 384
    assert info.max_tokens == engine.info.max_tokens
    assert info.architecture == "bert" and info.pooling == "mean" and info.normalize
    assert info.max_request_tokens == MAX_REQUEST
    assert info.vocab_size == engine.info.vocab_size and info.version


@pytest.mark.parametrize("sequences, options", [
    ([sentence(7592, 2088)], {}),
    ([sentence(7592), sentence(2023, 2003, 1037, 3231), sentence(4937)], {}),
    ([sentence(2003, 1037, length=256)], {}),                       # a whole batch alone
    ([sentence(3231, length=200), sentence(2088, length=120)], {}),  # spans two batches
    ([sentence(7592, 2088)], {"normalize": False}),
    ([sentence(7592, 2088), sentence(2023)], {"dimensions": 128}),
    ([sentence(7592, 2088), sentence(2023)], {"dimensions": 64, "normalize": False}),
])
def test_results_equal_the_engines_direct_output(stub, engine, sequences, options):
    response = stub.Embed(embed_request(sequences, **options), timeout=60)
    expected = reference(engine, sequences, options.get("normalize", True),
                         options.get("dimensions"))
    got = decode_embeddings(response)
    assert list(response.shape) == list(expected.shape)
    assert response.dtype == embed_pb2.FLOAT32
    assert response.prompt_tokens == sum(len(s) for s in sequences)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("dtype, torch_dtype, atol", [
    (embed_pb2.FLOAT16, torch.float16, 1e-3),
    (embed_pb2.BFLOAT16, torch.bfloat16, 8e-3),
])
def test_half_precision_outputs_are_the_rounded_float32_result(stub, engine, dtype, torch_dtype,
                                                               atol):
    sequences = [sentence(7592, 2088), sentence(2023, 2003)]
    response = stub.Embed(embed_request(sequences, dtype=dtype), timeout=60)
    assert response.dtype == dtype
    assert len(response.embeddings) == 2 * 384 * 2
    expected = torch.from_numpy(reference(engine, sequences)).to(torch_dtype).float().numpy()
    np.testing.assert_allclose(decode_embeddings(response), expected, rtol=0, atol=atol)


def test_64_concurrent_clients_get_their_own_results_in_order(server, engine):
    clients, per_client = 64, 20

    # Request n of client c holds a sequence naming the client and one naming the request
    # number, in an order that depends on both: a result delivered to the wrong client, the
    # wrong request, or with its rows swapped, does not match.
    by_client = [sentence(1000 + c, 1500 + c) for c in range(clients)]
    by_number = [sentence(3000 + n) for n in range(per_client)]

    def request_of(client: int, number: int) -> list[list[int]]:
        pair = [by_client[client], by_number[number]]
        return pair if (client + number) % 2 else pair[::-1]

    unique = by_client + by_number
    rows = reference(engine, unique)
    expected_row = {tuple(seq): rows[i] for i, seq in enumerate(unique)}

    async def client(channel, c: int) -> list[np.ndarray]:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        out = []
        for n in range(per_client):
            response = await stub.Embed(embed_request(request_of(c, n)), timeout=120)
            out.append(decode_embeddings(response))
        return out

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            return await asyncio.gather(*(client(channel, c) for c in range(clients)))

    results = asyncio.run(main())
    assert len(results) == clients
    for c, answers in enumerate(results):
        assert len(answers) == per_client
        for n, got in enumerate(answers):
            want = np.stack([expected_row[tuple(seq)] for seq in request_of(c, n)])
            assert got.shape == want.shape, (c, n)
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=f"client {c} #{n}")


BAD_INPUTS = {
    "empty request": (embed_pb2.EmbedRequest(), "empty request"),
    "cu_seqlens not starting at 0": (
        embed_pb2.EmbedRequest(input_ids=np.array([CLS, 7592, SEP], "<i4").tobytes(),
                               cu_seqlens=np.array([1, 3], "<i4").tobytes()),
        "must start at 0"),
    "cu_seqlens not increasing": (
        embed_pb2.EmbedRequest(input_ids=np.array([CLS, 7592, SEP], "<i4").tobytes(),
                               cu_seqlens=np.array([0, 2, 2, 3], "<i4").tobytes()),
        "strictly increasing"),
    "cu_seqlens not ending at the token count": (
        embed_pb2.EmbedRequest(input_ids=np.array([CLS, 7592, SEP], "<i4").tobytes(),
                               cu_seqlens=np.array([0, 2], "<i4").tobytes()),
        "ends at 2 but input_ids holds 3"),
    "token id past the vocabulary": (embed_request([[CLS, 30522, SEP]]), "outside the vocabulary"),
    "negative token id": (embed_request([[CLS, 7592, SEP], [CLS, -5, SEP]]),
                          "in sequence 1 is outside the vocabulary"),
    "sequence longer than the model allows": (
        embed_request([sentence(7592, length=257)]), "at most 256 tokens per sequence"),
    "more tokens than the per-request limit": (
        embed_request([sentence(7592, length=256)] * 16 + [[CLS, SEP]]), "per-request limit"),
    "several times the per-request limit (a message past the legal size)": (
        embed_request([[CLS]] * (3 * MAX_REQUEST)), "per-request limit"),
    "input_ids not whole int32s": (
        embed_pb2.EmbedRequest(input_ids=b"\x01\x00\x00", cu_seqlens=np.array([0, 1], "<i4")
                               .tobytes()), "multiple of 4"),
    "dimensions wider than the model": (embed_request([sentence(7592)], dimensions=385),
                                        "exceeds the model's width of 384"),
    "unknown output dtype": (embed_request([sentence(7592)], dtype=7), "dtype 7"),
}


def test_each_bad_input_gets_invalid_argument_while_good_requests_in_flight_succeed(
        server, engine):
    good = [[sentence(7592 + i, length=60)] for i in range(12)]

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            calls = [stub.Embed(embed_request(seqs), timeout=120) for seqs in good]
            calls += [stub.Embed(request, timeout=120) for request, _ in BAD_INPUTS.values()]
            return await asyncio.gather(*calls, return_exceptions=True)

    invalid_before = server.metric("hedgerow_server_requests_total", status="invalid_argument")
    outcomes = asyncio.run(main())
    for seqs, outcome in zip(good, outcomes[: len(good)]):
        assert not isinstance(outcome, BaseException), outcome
        np.testing.assert_allclose(decode_embeddings(outcome), reference(engine, seqs),
                                   rtol=0, atol=2e-5)
    for (name, (_, reason)), outcome in zip(BAD_INPUTS.items(), outcomes[len(good):]):
        assert isinstance(outcome, grpc.aio.AioRpcError), f"{name}: got {outcome!r}"
        assert outcome.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert reason in outcome.details(), f"{name}: {outcome.details()!r}"
    invalid_after = server.metric("hedgerow_server_requests_total", status="invalid_argument")
    assert invalid_after - invalid_before == len(BAD_INPUTS)


def test_a_burst_past_the_admission_bound_gets_resource_exhausted_for_the_excess(server, engine):
    # Each request holds 4096 tokens (16 batches of 256 on the CPU), the bound is 8192: two
    # are admitted and the rest of a simultaneous burst of eight are turned away at once.
    big = [[sentence(2000 + r, 3000 + i, length=256) for i in range(16)] for r in range(8)]

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            return await asyncio.gather(
                *(stub.Embed(embed_request(seqs), timeout=300) for seqs in big),
                return_exceptions=True)

    outcomes = asyncio.run(main())
    rejected = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert all(o.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for o in rejected), rejected
    assert all("admission bound" in o.details() for o in rejected)
    assert 1 <= len(rejected) <= len(big) - 2
    for seqs, outcome in zip(big, outcomes):
        if not isinstance(outcome, BaseException):
            np.testing.assert_allclose(decode_embeddings(outcome), reference(engine, seqs),
                                       rtol=0, atol=2e-5)
    assert server.metric("hedgerow_server_inflight_tokens") == 0


def test_an_expired_request_never_reaches_the_engine(server):
    # A 4096-token request keeps the engine busy for 16 batches; a small request with a short
    # deadline queues behind it (first come, first served) and expires in the pool. The token
    # counter shows the engine ran the big request's tokens and not one of the small one's.
    big = [sentence(2500, 3500 + i, length=256) for i in range(16)]
    small = [sentence(7592, 2088, 2003)]
    tokens_before = server.metric("hedgerow_server_tokens_total")
    expired_before = server.metric("hedgerow_server_requests_total", status="deadline_exceeded")

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            first = asyncio.ensure_future(stub.Embed(embed_request(big), timeout=300))
            while server.metric("hedgerow_server_tokens_total") == tokens_before:
                await asyncio.sleep(0.01)  # the big request is on the engine
            try:
                await stub.Embed(embed_request(small), timeout=0.2)
            except grpc.aio.AioRpcError as error:
                late = error
            else:
                late = None
            return await first, late

    response, late = asyncio.run(main())
    assert late is not None and late.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert list(response.shape) == [16, 384]
    assert server.metric("hedgerow_server_tokens_total") - tokens_before == 16 * 256
    assert server.metric("hedgerow_server_requests_total", status="deadline_exceeded") \
        == expired_before + 1
    assert server.metric("hedgerow_server_pool_tokens") == 0


def test_metrics_and_warmup_are_served_over_http(server, stub):
    stub.Embed(embed_request([sentence(7592, 2088)]), timeout=60)
    warmup = server.warmup()
    assert warmup["loaded"] is True and warmup["serving"] is True
    assert warmup["coverage"] == 1.0 and warmup["captured"] == 0  # the CPU engine has no graphs
    assert warmup["steps"] >= 1 and warmup["step_shapes_seen"] >= 1
    text = server.http_get("/metrics").decode()
    for name in ("hedgerow_server_tokens_total", "hedgerow_server_requests_total",
                 "hedgerow_server_batch_tokens", "hedgerow_server_batch_sequences",
                 "hedgerow_server_pool_tokens", "hedgerow_server_queue_seconds",
                 "hedgerow_server_step_seconds", "hedgerow_build_info"):
        assert name in text, name
    assert server.metric("hedgerow_server_requests_total", status="ok") >= 1
    assert server.http_get("/readyz") == b"serving\n"
    with pytest.raises(urllib.error.HTTPError) as missing:
        server.http_get("/nothing-here")
    assert missing.value.code == 404
    assert json.loads(server.http_get("/warmup?verbose=1"))["loaded"] is True


@pytest.mark.parametrize("method", ["Embed", "Score", "Info"])
def test_bytes_that_are_no_message_get_invalid_argument_and_no_traceback(server, method):
    with grpc.insecure_channel(server.address) as channel:
        call = channel.unary_unary(f"/hedgerow.v1.Embedder/{method}",
                                   request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            call(b"\x0a\xff\xff\xff\xff\x0f", timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the request is not a valid hedgerow.v1." in caught.value.details()
    assert "<class" not in caught.value.details()
    # The live log: no traceback from grpc's own decoding.
    assert "Traceback" not in server.log_path.read_text()


@pytest.mark.parametrize("request_bytes, status, header", [
    (b"GET /warmup HTTP/1.1\nHost: x\n\n", b"200", None),       # bare LF line ends
    (b"POST /warmup HTTP/1.1\r\nHost: x\r\n\r\n", b"405", b"Allow: GET, HEAD"),
    (b"BROKEN\r\n\r\n", b"400", None),
    (b"GET http://x:9090/warmup?a=1 HTTP/1.1\r\nHost: x\r\n\r\n", b"200", None),  # absolute
    (b"HEAD /warmup HTTP/1.1\r\nHost: x\r\n\r\n", b"200", b"Content-Length: "),
    (b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n", b"404", b"Content-Length: "),
])
def test_the_http_side_answers_odd_requests(server, request_bytes, status, header):
    import socket

    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as conn:
        conn.sendall(request_bytes)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] == status, answer[:200]
    if header:
        assert header in answer
    if request_bytes.startswith(b"HEAD"):  # RFC 9110: a head, never a body
        assert answer.endswith(b"\r\n\r\n"), answer


def test_auto_dtype_is_reported_with_its_reason(start_server):
    from hedgerow.engine.dtype_choice import cpu_has_native_bfloat16

    server = start_server("--dtype", "auto")
    with grpc.insecure_channel(server.address) as channel:
        info = embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=30)
    assert info.dtype in ("float32", "bfloat16") and info.dtype_reason
    if not cpu_has_native_bfloat16():
        assert info.dtype == "float32"
    assert f"dtype={info.dtype}" in server.log_text()


def test_a_cpu_server_names_the_gpu_settings_it_ignores(start_server, tmp_path):
    server = start_server("--compile-cache", str(tmp_path), "--no-graphs")
    line = next(line for line in server.log_text().splitlines()
                if "event=server.gpu_settings_ignored" in line)
    assert "WARNING" in line and "settings=--graphs,--compile-cache" in line


def test_reflection_lists_and_describes_the_services(server):
    """What grpcurl does: list the services, then resolve a method's messages, with no .proto."""
    from google.protobuf import descriptor_pool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    with grpc.insecure_channel(server.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        assert set(database.get_services()) == {
            "hedgerow.v1.Embedder", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"}
        pool = descriptor_pool.DescriptorPool(database)
        embed = pool.FindServiceByName("hedgerow.v1.Embedder").FindMethodByName("Embed")
        assert [f.name for f in embed.input_type.fields][:2] == ["input_ids", "cu_seqlens"]
