"""kernels/small_products_triton.py in Triton's CPU interpreter against the float32 reference
(the CI subset), and the public functions' argument checks.

The kernels run in a fresh child process with TRITON_INTERPRET=1. The interpreter's `tl.dot`
miscomputes bfloat16 (see test_ragged_attention_interpreter.py), so bfloat16, programmatic
dependent launch and the L2 prefetch (neither exists in the interpreter) are checked on a GPU
only, by test_small_products_gpu.py, which also runs everything here compiled.
"""

import pytest
import torch

from hedgerow.kernels.small_products import (Tile, product, product_add_norm, reference_product,
                                             reference_product_add_norm)

CHILD = """
import torch
from hedgerow.kernels.small_products import (Tile, reference_product,
                                             reference_product_add_norm)
from hedgerow.kernels.small_products_triton import product_add_norm_triton, product_triton
torch.manual_seed(0)
checked = 0
# (M, K, N, tile, dtype): one row, rows and columns that fill no tile, K that fills no step,
# K split into 3 and 5 programs (the last one short), float16
for m, k, n, tile, dtype in ((1, 24, 70, Tile(16, 32, 32, 1, 2), torch.float32),
                             (37, 100, 130, Tile(16, 32, 32, 3, 2), torch.float32),
                             (33, 256, 64, Tile(32, 64, 32, 5, 2), torch.float16),
                             (5, 64, 48, Tile(16, 16, 16, 2, 2), torch.float32)):
    x = torch.randn(m, k).to(dtype)
    w = (torch.randn(n, k) * 0.1).to(dtype)
    b, g, beta = (torch.randn(n).to(dtype) for _ in range(3))
    residual = torch.randn(m, n).to(dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-3
    for gelu in (False, True):
        got = product_triton(x, w, b, gelu, tile, False)
        assert got.shape == (m, n) and got.dtype == dtype
        torch.testing.assert_close(got, reference_product(x, w, b, gelu), atol=tolerance,
                                   rtol=tolerance)
        checked += 1
    got = product_add_norm_triton(x, w, b, residual, g, beta, 1e-5, tile, False)
    torch.testing.assert_close(got, reference_product_add_norm(x, w, b, residual, g, beta, 1e-5),
                               atol=tolerance * 10, rtol=tolerance * 10)
    checked += 1
# a strided view (the models' attention output slice), and a NaN that poisons only its row
wide = torch.randn(9, 3 * 40)
x = wide[:, 40:80]
x[4, 7] = float("nan")
w, b = torch.randn(50, 40) * 0.1, torch.randn(50)
residual, g, beta = torch.randn(9, 50), torch.randn(50), torch.randn(50)
for got in (product_triton(x, w, b, False, Tile(16, 32, 16, 2, 2), False),
            product_add_norm_triton(x, w, b, residual, g, beta, 1e-5, Tile(16, 32, 16, 2, 2),
                                    False)):
    assert got[4].isnan().all() and not got[:4].isnan().any() and not got[5:].isnan().any()
torch.testing.assert_close(product_triton(x, w, b, False, Tile(16, 32, 16, 2, 2), False),
                           reference_product(x, w, b), equal_nan=True, atol=1e-4, rtol=1e-4)
print("ok", checked + 1)
"""


def test_the_kernels_match_their_references_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 13"


def _inputs(m=5, k=8, n=6):
    torch.manual_seed(m * k + n)
    return (torch.randn(m, k), torch.randn(n, k), torch.randn(n), torch.randn(m, n),
            torch.randn(n), torch.randn(n))


def test_on_the_cpu_they_are_the_references():
    x, w, b, residual, g, beta = _inputs()
    for gelu in (False, True):
        torch.testing.assert_close(product(x, w, b, gelu), reference_product(x, w, b, gelu))
    torch.testing.assert_close(product_add_norm(x, w, b, residual, g, beta, 1e-6),
                               reference_product_add_norm(x, w, b, residual, g, beta, 1e-6))


def test_the_references_are_the_torch_formulas():
    x, w, b, residual, g, beta = _inputs()
    torch.testing.assert_close(reference_product(x, w, b, True),
                               torch.nn.functional.gelu(x @ w.T + b))
    torch.testing.assert_close(
        reference_product_add_norm(x, w, b, residual, g, beta, 1e-6),
        torch.nn.functional.layer_norm(x @ w.T + b + residual, (6,), g, beta, 1e-6))


@pytest.mark.parametrize("change, message", [
    (lambda x, w, b, r, g, be: (x[0], w, b, r, g, be), "x must be"),
    (lambda x, w, b, r, g, be: (x, w[:, :3], b, r, g, be), "x must be"),
    (lambda x, w, b, r, g, be: (x, w, b[:2], r, g, be), "bias must be"),
    (lambda x, w, b, r, g, be: (x, w, b, r[:2], g, be), "residual must be"),
    (lambda x, w, b, r, g, be: (x, w, b, r, g[:1], be), "gamma must be"),
    (lambda x, w, b, r, g, be: (x, w, b, r, g, be.double()), "one float dtype"),
    (lambda x, w, b, r, g, be: (x.long(), w.long(), b.long(), r.long(), g.long(), be.long()),
     "one float dtype"),
])
def test_malformed_arguments_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        product_add_norm(*change(*_inputs()), 1e-5)


@pytest.mark.parametrize("tile", [Tile(8, 32, 32), Tile(16, 48, 32), Tile(16, 32, 32, 0)])
def test_a_malformed_tile_is_named(tile):
    x, w, b, *_ = _inputs()
    with pytest.raises(ValueError, match="a tile's sides"):
        product(x, w, b, tile=tile)
