"""Each CUDA ragged-attention backend against a float64 reference, eagerly and inside a CUDA
graph (fixed `max_seqlen` longer than any sequence, empty sequences included). Needs CUDA.
"""

import pytest
import torch

from hedgerow.kernels.ragged_attention import reference_attention

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.engine.attention_cuda import (BACKEND_NAMES, UNIFORM_ONLY,  # noqa: E402
                                            available_backends, routed)

SHAPES = {  # name: (query heads, kv heads, head dim)
    "mha-d64": (16, 16, 64),
    "gqa-d128": (16, 8, 128),
}
LENGTHS = [1, 7, 64, 0, 129, 33]  # a zero-length sequence, as the graph cache's empty slots


def _inputs(q_heads, kv_heads, head_dim, lengths, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lengths)
    q = torch.randn(total, q_heads, head_dim, device="cuda", generator=generator)
    k = torch.randn(total, kv_heads, head_dim, device="cuda", generator=generator)
    v = torch.randn(total, kv_heads, head_dim, device="cuda", generator=generator)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return q.bfloat16(), k.bfloat16(), v.bfloat16(), cu.cuda()


def _relative_error(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("backend", [n for n in BACKEND_NAMES if n not in UNIFORM_ONLY])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("causal", [False, True])
def test_backend_matches_float64_reference(backend, shape, causal):
    backends = available_backends()
    if backend not in backends:
        pytest.skip(f"{backend} is not available here")
    fn = backends[backend]
    q, k, v, cu = _inputs(*SHAPES[shape], LENGTHS, seed=1)
    ref = reference_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(), cu.cpu(),
                              max(LENGTHS), causal)
    out = fn(q, k, v, cu, max(LENGTHS), causal)
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert _relative_error(out.cpu(), ref) < 1.5e-2

    # Inside a graph: max_seqlen fixed above the longest sequence; replay on fresh data.
    static = [t.clone() for t in (q, k, v)]
    fn(*static, cu, 256, causal)  # warm outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = fn(*static, cu, 256, causal)
    q2, k2, v2, _ = _inputs(*SHAPES[shape], LENGTHS, seed=2)
    for dst, src in zip(static, (q2, k2, v2)):
        dst.copy_(src)
    graph_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref2 = reference_attention(q2.cpu().double(), k2.cpu().double(), v2.cpu().double(),
                               cu.cpu(), max(LENGTHS), causal)
    assert torch.isfinite(graph_out).all()
    assert _relative_error(graph_out.cpu(), ref2) < 1.5e-2


def _in_a_graph(fn, inputs, fresh):
    """fn on `inputs` captured in a CUDA graph, replayed on `fresh` copied into them."""
    static = [t.clone() for t in inputs]
    fn(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    for dst, src in zip(static, fresh):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqs, length", [(3, 77), (2, 512), (5, 64)])
def test_cudnn_on_a_uniform_batch_matches_float64_reference(shape, causal, seqs, length):
    backends = available_backends()
    if "cudnn" not in backends:
        pytest.skip("cudnn is not available here")
    fn = backends["cudnn"]
    q, k, v, cu = _inputs(*SHAPES[shape], [length] * seqs, seed=3)
    ref = reference_attention(q.cpu().double(), k.cpu().double(), v.cpu().double(), cu.cpu(),
                              length, causal)
    out = fn(q, k, v, cu, length, causal)
    assert out.shape == q.shape and out.is_contiguous() and torch.isfinite(out).all()
    assert _relative_error(out.cpu(), ref) < 1.5e-2
    # strided views of one fused QKV product, as the BERT family passes them
    if SHAPES[shape][0] == SHAPES[shape][1]:
        qkv = torch.stack((q, k, v), dim=1)                              # [T, 3, H, D]
        strided = fn(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, length, causal)
        torch.testing.assert_close(strided, out)
    q2, k2, v2, _ = _inputs(*SHAPES[shape], [length] * seqs, seed=4)
    graph_out = _in_a_graph(lambda a, b, c: fn(a, b, c, cu, length, causal), (q, k, v),
                            (q2, k2, v2))
    ref2 = reference_attention(q2.cpu().double(), k2.cpu().double(), v2.cpu().double(),
                               cu.cpu(), length, causal)
    assert _relative_error(graph_out.cpu(), ref2) < 1.5e-2


def test_one_compile_serves_every_backend_through_the_custom_op():
    """The backend is an integer input of the compiled function, not a different Python
    object, so switching it must not compile the function again."""
    from torch._dynamo.utils import counters

    ragged = [n for n in available_backends() if n not in UNIFORM_ONLY]
    if len(ragged) < 2:
        pytest.skip("needs two ragged backends")
    torch._dynamo.reset()
    counters.clear()

    def layer(q, k, v, cu, max_seqlen, backend):
        return routed(backend)(q * 2, k, v, cu, max_seqlen, False) + 1

    compiled = torch.compile(layer, dynamic=True)
    q, k, v, cu = _inputs(16, 16, 64, LENGTHS, seed=5)
    results = {}
    for name in ragged:
        with torch.inference_mode():
            results[name] = compiled(q, k, v, cu, 256, BACKEND_NAMES.index(name))
        expected = available_backends()[name](q * 2, k, v, cu, 256, False) + 1
        assert _relative_error(results[name], expected) < 1e-2
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
