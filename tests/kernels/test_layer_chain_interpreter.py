"""benchmarks/layer_chain_gpu.py's persistent kernel in Triton's CPU interpreter against the
torch chain it is timed against, on small odd shapes.

The interpreter runs programs one after another, so the kernel runs as one program (its
barriers pass at once) and in float32 (the interpreter's `tl.dot` miscomputes bfloat16); the
GPU run checks the many-program bf16 kernel against cuBLAS's chain (cosine) before timing it.
Both ways of loading are checked: pointers, and tensor descriptors (TMA on a GPU).
"""

import re

import pytest
import torch

CHILD = """
import torch
import torch.nn.functional as F
from hedgerow.bench import layer_chain_gpu as chain_module
torch.manual_seed(0)
checked = 0
for hidden, ff, layers, rows, tiles in (
        (64, 256, 2, 5, dict(BK=32, BN_QKV=32, BN_O=32, SPLIT_O=2, BN_UP=32, BN_DOWN=32,
                             SPLIT_DOWN=2)),
        (48, 96, 3, 16, dict(BK=16, BN_QKV=16, BN_O=16, SPLIT_O=1, BN_UP=32, BN_DOWN=16,
                             SPLIT_DOWN=3))):
    w = chain_module.random_layers(hidden, 3 * hidden, ff, layers, "cpu", torch.float32)
    x = torch.randn(rows, hidden)
    for tma in (False, True):
        chain = chain_module.PersistentChain(w, tiles | dict(warps=4, stages=2, TMA=tma),
                                             programs=1, block_m=16)
        got, want = chain(x), chain_module.reference_chain(x, w)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert chain.sync.item() == 6 * layers  # six barriers a layer
        checked += 1
print("ok", checked)
"""


def test_the_persistent_chain_matches_the_torch_chain_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 4"


def test_tiles_that_do_not_divide_the_products_are_refused():
    from hedgerow.bench import layer_chain_gpu as chain_module
    w = chain_module.random_layers(64, 192, 256, 1, "cpu", torch.float32)
    tiles = dict(BK=32, BN_QKV=32, BN_O=32, SPLIT_O=4, BN_UP=32, BN_DOWN=32, SPLIT_DOWN=2,
                 warps=4, stages=2)
    message = "a [64, 64] product needs N a multiple of 32 and K of 4 x 32"
    with pytest.raises(ValueError, match=re.escape(message)):
        chain_module.PersistentChain(w, tiles, programs=1, block_m=16)
