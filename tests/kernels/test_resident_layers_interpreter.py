"""kernels/resident_layers_triton.py in Triton's CPU interpreter against the plain-torch
reference, and kernels/resident_layers.py's argument checks and CPU path.

The interpreter runs programs one after another, so the kernel runs as one program (its
barriers pass at once) and in float32 (the interpreter's `tl.dot` miscomputes bfloat16), both
through pointers and through tensor descriptors, with K split in two and in three; on a GPU
benchmarks/resident_gpu.py compares the engine with and without it (cosine) before timing them.
"""

import re

import pytest
import torch

from hedgerow.kernels.resident_layers import (MAX_TOKENS, STACKED, TILES, fits,
                                              reference_bert_layers, resident_bert_layers,
                                              tiles_for)

CHILD = """
import torch
from hedgerow.kernels.resident_layers import reference_bert_layers
from hedgerow.kernels.resident_layers_triton import bert_layers_triton
torch.manual_seed(0)
def stacked(hidden, ff, layers):
    def r(*shape, scale, centre=0.0):
        return torch.randn(layers, *shape) * scale + centre
    return dict(qkv_w=r(3 * hidden, hidden, scale=0.1), qkv_b=r(3 * hidden, scale=0.02),
                o_w=r(hidden, hidden, scale=0.1), o_b=r(hidden, scale=0.02),
                g1=r(hidden, scale=0.1, centre=1.0), b1=r(hidden, scale=0.02),
                up_w=r(ff, hidden, scale=0.1), up_b=r(ff, scale=0.02),
                down_w=r(hidden, ff, scale=0.1), down_b=r(hidden, scale=0.02),
                g2=r(hidden, scale=0.1, centre=1.0), b2=r(hidden, scale=0.02))
checked = 0
# the last shape splits the output product's K in three (as all-MiniLM-L6-v2's 384 in 128s)
for hidden, ff, heads, layers, split_o in ((64, 128, 4, 2, 2), (128, 64, 8, 1, 2),
                                           (96, 64, 6, 1, 3)):
    tiles = dict(BM=32, BQ=16, BK=32, BN_QKV=32, BN_O=32, SPLIT_O=split_o, BN_UP=32,
                 BN_DOWN=32, SPLIT_DOWN=2, warps=4, stages=2)
    w = stacked(hidden, ff, layers)
    # one sequence; ragged with an empty one; a full tile of two; one token
    for cu in ([0, 5], [0, 3, 3, 9, 13], [0, 20, 32], [0, 1]):
        cu = torch.tensor(cu, dtype=torch.int32)
        x = torch.randn(int(cu[-1]), hidden)
        want = reference_bert_layers(x, cu, w, heads, 1e-5)
        for tma in (False, True):
            got, sync = bert_layers_triton(x, cu, w, heads, 1e-5, tiles | dict(TMA=tma), 1)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            assert sync.item() == 7 * layers  # seven barriers a layer
            checked += 1
print("ok", checked)
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 24"


def _stacked(hidden=256, ff=512, layers=1, dtype=torch.float32):
    torch.manual_seed(0)
    shapes = dict(qkv_w=(3 * hidden, hidden), qkv_b=(3 * hidden,), o_w=(hidden, hidden),
                  o_b=(hidden,), g1=(hidden,), b1=(hidden,), up_w=(ff, hidden), up_b=(ff,),
                  down_w=(hidden, ff), down_b=(hidden,), g2=(hidden,), b2=(hidden,))
    return {k: (torch.randn(layers, *v) * 0.05).to(dtype) for k, v in shapes.items()}


def test_the_reference_keeps_sequences_apart():
    w = _stacked(hidden=512, ff=1024)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    x = torch.randn(9, 512)
    together = reference_bert_layers(x, cu, w, 8, 1e-5)
    alone = [reference_bert_layers(x[a:b], torch.tensor([0, b - a], dtype=torch.int32), w, 8,
                                   1e-5) for a, b in ((0, 4), (4, 9))]
    torch.testing.assert_close(together, torch.cat(alone), rtol=1e-5, atol=1e-5)


def test_off_cuda_the_reference_runs():
    w = _stacked(hidden=512, ff=1024)
    x, cu = torch.randn(7, 512), torch.tensor([0, 7], dtype=torch.int32)
    assert torch.equal(resident_bert_layers(x, cu, w, 8, 1e-5),
                       reference_bert_layers(x, cu, w, 8, 1e-5))


@pytest.mark.parametrize("hidden, ff, heads, splits", [
    (1024, 4096, 16, (4, 4)),  # BGE-M3
    (384, 1536, 12, (3, 4)),   # all-MiniLM-L6-v2: 3 blocks of 128 in K
    (768, 3072, 12, (3, 4)),   # BERT-base
    (1024, 4096, 12, None),    # head dim not a whole number
    (320, 1280, 10, None),     # 320 not a multiple of 128
    (1024, 4096, 32, (4, 4)),  # head dim 32
    (1152, 4608, 24, None),    # head dim 48, not a power of two
])
def test_which_sides_fit_and_how_k_is_split(hidden, ff, heads, splits):
    tiles = tiles_for(hidden, ff, heads)
    assert fits(hidden, ff, heads) is (splits is not None)
    assert (tiles and (tiles["SPLIT_O"], tiles["SPLIT_DOWN"])) == (splits or None)


@pytest.mark.parametrize("change, message", [
    (lambda x, cu, w: (x[:0], cu, w), "1 to 128 tokens"),
    (lambda x, cu, w: (torch.randn(MAX_TOKENS + 1, 512), cu, w), "1 to 128 tokens"),
    (lambda x, cu, w: (x, cu, {k: v for k, v in w.items() if k != "g2"}),
     "stacked weights missing: g2"),
    (lambda x, cu, w: (torch.randn(7, 256), cu, w), "do not fit hidden 256"),
    (lambda x, cu, w: (x, cu.long(), w), "cu_seqlens must be int32"),
])
def test_bad_arguments_are_refused_by_name(change, message):
    w = _stacked(hidden=512, ff=1024)
    x, cu = torch.randn(7, 512), torch.tensor([0, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match=re.escape(message)):
        resident_bert_layers(*change(x, cu, w), 8, 1e-5)


def test_heads_that_do_not_split_the_hidden_size_are_refused():
    w = _stacked(hidden=512, ff=1024)
    x, cu = torch.randn(7, 512), torch.tensor([0, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match="512, intermediate 1024, 7 heads do not fit"):
        resident_bert_layers(x, cu, w, 7, 1e-5)


def test_the_tiles_and_stack_names_are_the_kernels():
    assert TILES["BM"] == MAX_TOKENS and len(STACKED) == 12
