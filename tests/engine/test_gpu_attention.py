"""Each CUDA ragged-attention backend against a float64 reference, eagerly and inside a CUDA
graph (fixed `max_seqlen` longer than any sequence, empty sequences included). Needs CUDA.
"""

import pytest
import torch

from hedgerow.engine.attention import reference_attention

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.engine.attention_cuda import available_backends  # noqa: E402

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


@pytest.mark.parametrize("backend", ["varlen", "flash_attn", "sdpa"])
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
