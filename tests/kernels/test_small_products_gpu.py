"""kernels/small_products.py compiled on a GPU against its float32 reference: odd sizes, three
dtypes, split K, programmatic dependent launch with the L2 prefetch (Hopper and later), a
misaligned weight (no prefetch), a NaN's reach, and a chain of dependent products captured in a
CUDA graph (each kernel must wait for the one before). Needs CUDA.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.kernels.small_products import (Tile, product, product_add_norm,  # noqa: E402
                                             reference_product, reference_product_add_norm)

HOPPER = torch.cuda.get_device_capability()[0] >= 9
PDL = [False, pytest.param(True, marks=pytest.mark.skipif(not HOPPER, reason="needs sm90+"))]
# float32 multiplies in TF32
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-2}
# (M, K, N, tile): nothing fills a tile; BGE-M3's shapes at 128 tokens with the default tiles
# (QKV, output, up, down); K split unevenly; wider than one sum block
SHAPES = [(1, 24, 70, Tile(16, 32, 32, 1, 2)), (37, 100, 130, Tile(16, 32, 32, 3, 2)),
          (128, 1024, 3072, None), (128, 1024, 1024, None), (128, 1024, 4096, None),
          (128, 4096, 1024, None), (200, 1000, 257, Tile(64, 64, 64, 3, 3)),
          (3, 2048, 1500, Tile(16, 128, 128, 2, 3))]


def _inputs(m, k, n, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=generator) * scale).to(dtype)

    return (rand(m, k), rand(n, k, scale=k ** -0.5), rand(n, scale=0.1), rand(m, n),
            rand(n, scale=0.1) + 1, rand(n, scale=0.1))


@pytest.mark.parametrize("pdl", PDL)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("m,k,n,tile", SHAPES, ids=lambda v: str(v))
def test_the_kernels_match_their_references(m, k, n, tile, dtype, pdl):
    x, w, b, residual, g, beta = _inputs(m, k, n, dtype)
    tolerance = TOLERANCE[dtype]
    for gelu in (False, True):
        got = product(x, w, b, gelu, tile, pdl)
        assert got.shape == (m, n) and got.dtype == dtype
        torch.testing.assert_close(got, reference_product(x, w, b, gelu), atol=tolerance,
                                   rtol=tolerance)
    got = product_add_norm(x, w, b, residual, g, beta, 1e-5, tile, pdl)
    torch.testing.assert_close(got, reference_product_add_norm(x, w, b, residual, g, beta, 1e-5),
                               atol=tolerance * 2, rtol=tolerance * 2)


@pytest.mark.parametrize("pdl", PDL)
def test_a_misaligned_weight_and_a_strided_input(pdl):
    x, w, b, residual, g, beta = _inputs(9, 1025, 300, torch.bfloat16)
    weight = w                     # rows 2,050 bytes apart, not a 16-byte multiple: no prefetch
    wide = torch.cat([x, x, x], 1)
    strided = wide[:, 1025:2050]   # row stride 3,075
    for got, want in ((product(strided, weight, b, False, None, pdl),
                       reference_product(strided, weight, b)),
                      (product_add_norm(strided, weight, b, residual, g, beta, 1e-5, None, pdl),
                       reference_product_add_norm(strided, weight, b, residual, g, beta, 1e-5))):
        torch.testing.assert_close(got, want, atol=4e-2, rtol=4e-2)


@pytest.mark.parametrize("pdl", PDL)
def test_a_nan_poisons_its_own_row_only(pdl):
    x, w, b, residual, g, beta = _inputs(40, 512, 256, torch.bfloat16)
    x[17, 100] = float("nan")
    for got in (product(x, w, b, True, None, pdl),
                product_add_norm(x, w, b, residual, g, beta, 1e-5, None, pdl)):
        assert got[17].isnan().all()
        assert not got[:17].isnan().any() and not got[18:].isnan().any()


@pytest.mark.parametrize("pdl", PDL)
def test_a_chain_of_dependent_products_replays_in_a_graph(pdl):
    """Four layers of QKV-like, output + norm, up + GELU and down + norm products, each reading
    what the one before wrote, captured once and replayed on new inputs."""
    torch.manual_seed(3)
    h, ff, m = 256, 1024, 96
    layers = [[(torch.randn(n, k, device="cuda") * k ** -0.5).to(torch.bfloat16)
               for n, k in ((3 * h, h), (h, h), (ff, h), (h, ff))] for _ in range(4)]
    vector = torch.randn(ff, device="cuda").to(torch.bfloat16) * 0.1
    g, beta = vector[:h] + 1, vector[:h] * 0.5
    x = torch.randn(m, h, device="cuda").to(torch.bfloat16)

    def chain(run, run_norm):
        y = x
        for qkv, out, up, down in layers:
            a = run(y, qkv, vector[:3 * h], False)[:, h:2 * h]
            h1 = run_norm(a, out, vector[:h], y, g, beta, 1e-5)
            u = run(h1, up, vector, True)
            y = run_norm(u, down, vector[:h], h1, g, beta, 1e-5)
        return y

    def kernels():
        return chain(lambda *a: product(*a, tile=None, pdl=pdl),
                     lambda *a: product_add_norm(*a, tile=None, pdl=pdl))

    kernels()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = kernels()
    for seed in (5, 6):
        x.copy_(torch.randn(m, h, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed)).to(torch.bfloat16))
        graph.replay()
        want = chain(reference_product, reference_product_add_norm)
        cosine = torch.nn.functional.cosine_similarity(static_out.float(), want.float(), dim=-1)
        assert cosine.min() > 0.999
