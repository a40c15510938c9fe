"""kernels/resident_layers.py's kernel against its float32-sum reference on CUDA (tensor-
descriptor loads on Hopper and newer, pointers before): BGE-M3's sides and two smaller, one
sequence, ragged batches with empty and one-token sequences, one token and a full tile of 128,
and a CUDA-graph replay on fresh data. Needs CUDA; the engine with and without it is compared
by benchmarks/resident_gpu.py."""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.kernels.resident_layers import (STACKED, reference_bert_layers,  # noqa: E402
                                              resident_bert_layers)

# hidden, intermediate, heads, layers; all-MiniLM-L6-v2's splits the output product's K in 3
SHAPES = {"bge-m3": (1024, 4096, 16, 3), "small": (512, 1024, 8, 2),
          "all-minilm-l6-v2": (384, 1536, 12, 2)}


def _stacked(hidden, ff, layers, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes = dict(qkv_w=(3 * hidden, hidden), qkv_b=(3 * hidden,), o_w=(hidden, hidden),
                  o_b=(hidden,), g1=(hidden,), b1=(hidden,), up_w=(ff, hidden), up_b=(ff,),
                  down_w=(hidden, ff), down_b=(hidden,), g2=(hidden,), b2=(hidden,))
    w = {k: torch.randn(layers, *v, device="cuda", generator=g) * 0.03 for k, v in shapes.items()}
    w["g1"] += 1.0
    w["g2"] += 1.0
    return {k: w[k].to(torch.bfloat16) for k in STACKED}


def _cu(lengths):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return cu.cuda()


def _close(got, want):
    cosine = torch.nn.functional.cosine_similarity(got.float(), want.float(), dim=-1)
    assert cosine.min().item() > 0.999, cosine.min().item()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lengths", [[1], [128], [7], [30, 0, 50, 41], [1, 0, 1, 5, 0]])
def test_the_kernel_matches_its_reference(shape, lengths):
    hidden, ff, heads, layers = SHAPES[shape]
    w = _stacked(hidden, ff, layers)
    x = torch.randn(sum(lengths), hidden, device="cuda").to(torch.bfloat16)
    cu = _cu(lengths)
    got = resident_bert_layers(x, cu, w, heads, 1e-5)
    assert got.shape == x.shape and got.dtype == x.dtype
    _close(got, reference_bert_layers(x, cu, w, heads, 1e-5))


def test_a_graph_replays_it_on_fresh_data():
    hidden, ff, heads, layers = SHAPES["small"]
    w = _stacked(hidden, ff, layers)
    x = torch.randn(100, hidden, device="cuda").to(torch.bfloat16)
    cu = _cu([60, 40])
    resident_bert_layers(x, cu, w, heads, 1e-5)  # compiles before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = resident_bert_layers(x, cu, w, heads, 1e-5)
    for seed in (1, 2):
        x.copy_(torch.randn(100, hidden, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed)))
        graph.replay()
        _close(out, reference_bert_layers(x, cu, w, heads, 1e-5))
