"""The Triton kernels behind kernels/small_products.py (see there for the functions and why).

`_product` computes one BM x BN tile of x weight^T over one K slice (program_id 2): with split
K it stores float32 partial sums [split, M, N], unsplit it adds the bias (and the exact GELU)
and stores x's dtype. `_sum_bias` adds the partials, the bias and the GELU; `_add_norm` adds the
partials, the bias and the residual and normalizes the row. With PDL every kernel reads only
weights and vectors (never written by a kernel before it) until `gdc_wait`. Arguments are checked
by the caller.
"""

import torch
import triton
import triton.language as tl

from .small_products import Tile, reference_product, reference_product_add_norm

_PARTIAL, _BIAS, _GELU = 0, 1, 2


@triton.jit
def _gelu(y):
    return 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))


@triton.jit
def _product(x_ptr, w_ptr, w_address, bias_ptr, out_ptr, M, N, K, x_row_stride, k_per_program,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OUT: tl.constexpr,
             ELEMENT_BYTES: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr):
    n_block, m_block, k_slice = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = m_block * BM + tl.arange(0, BM)
    cols = n_block * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    k_first = k_slice * k_per_program
    k_end = tl.minimum(k_first + k_per_program, K)
    if PREFETCH:
        # This program's weight rows, [k_first, k_end) of each, toward L2: a hint, issued
        # before the wait since no kernel writes weights (16-byte multiples; the caller checked
        # the alignment).
        nbytes = tl.where(cols < N, (k_end - k_first) * ELEMENT_BYTES // 16 * 16, 0)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.gt.s32 p, $2, 0; "
            "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }", "=r,l,r",
            [w_address + (cols.to(tl.int64) * K + k_first) * ELEMENT_BYTES, nbytes],
            dtype=tl.int32, is_pure=False, pack=1)
    if PDL:
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(k_first, k_end, BK):
        kk = k + ks
        a = tl.load(x_ptr + rows[:, None].to(tl.int64) * x_row_stride + kk[None, :],
                    mask=(rows[:, None] < M) & (kk[None, :] < k_end), other=0.0)
        b = tl.load(w_ptr + cols[None, :].to(tl.int64) * K + kk[:, None],
                    mask=(cols[None, :] < N) & (kk[:, None] < k_end), other=0.0)
        acc = tl.dot(a, b, acc)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    at = rows[:, None].to(tl.int64) * N + cols[None, :]
    if OUT == 0:
        tl.store(out_ptr + (k_slice * M).to(tl.int64) * N + at, acc, mask=inside)
    else:
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :].to(tl.float32)
        if OUT == 2:
            acc = _gelu(acc)
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _bias_and_partials(part_ptr, splits, bias_ptr, row, cols, inside, M, N, PDL: tl.constexpr):
    """bias + the `splits` partial sums at (row, cols), float32. With PDL the wait comes after
    the bias (a vector no kernel writes) and before the partials."""
    y = tl.load(bias_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    at = row.to(tl.int64) * N + cols
    for s in range(splits):
        y += tl.load(part_ptr + (s * M).to(tl.int64) * N + at, mask=inside,
                     other=0.0).to(tl.float32)
    return y


@triton.jit
def _sum_bias(part_ptr, splits, bias_ptr, out_ptr, M, N, GELU: tl.constexpr,
              BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < N
    y = _bias_and_partials(part_ptr, splits, bias_ptr, row, cols, inside, M, N, PDL)
    if GELU:
        y = _gelu(y)
    tl.store(out_ptr + row.to(tl.int64) * N + cols, y.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _add_norm(part_ptr, splits, bias_ptr, residual_ptr, gamma_ptr, beta_ptr, out_ptr, M, N, eps,
              BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < N
    gamma = tl.load(gamma_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    y = _bias_and_partials(part_ptr, splits, bias_ptr, row, cols, inside, M, N, PDL)
    at = row.to(tl.int64) * N + cols
    y += tl.load(residual_ptr + at, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(y, 0) / N
    centered = tl.where(inside, y - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centered * centered, 0) / N + eps)
    tl.store(out_ptr + at, (centered * rstd * gamma + beta).to(out_ptr.dtype.element_ty),
             mask=inside)


def _slices(k: int, tile: Tile) -> tuple[int, int]:
    """(K per program, a multiple of BK; how many programs split K)."""
    per_program = triton.cdiv(triton.cdiv(k, tile.split), tile.bk) * tile.bk
    return per_program, triton.cdiv(k, per_program)


def _launch_product(x, weight, bias, out, kind, tile: Tile, pdl: bool) -> None:
    m, k = x.shape
    n = weight.shape[0]
    per_program, splits = _slices(k, tile)
    element = weight.element_size()
    # the bulk prefetch wants 16-byte aligned addresses: every row start and slice start
    prefetch = pdl and (k * element) % 16 == 0 and weight.data_ptr() % 16 == 0
    _product[(triton.cdiv(n, tile.bn), triton.cdiv(m, tile.bm), splits)](
        x, weight, weight.data_ptr(), bias, out, m, n, k, x.stride(0), per_program,
        BM=tile.bm, BN=tile.bn, BK=tile.bk, OUT=kind, ELEMENT_BYTES=element, PREFETCH=prefetch,
        PDL=pdl, num_warps=4, num_stages=tile.stages, launch_pdl=pdl)


def _ready(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x if x.stride(1) == 1 else x.contiguous()), weight.contiguous()


def product_triton(x, weight, bias, gelu: bool, tile: Tile, pdl: bool) -> torch.Tensor:
    x, weight = _ready(x, weight)
    (m, k), n = x.shape, weight.shape[0]
    if m == 0 or n == 0 or k == 0:  # nothing to multiply: no kernel
        return reference_product(x, weight, bias, gelu)
    out = x.new_empty((m, n))
    _, splits = _slices(k, tile)
    if splits == 1:
        _launch_product(x, weight, bias, out, _GELU if gelu else _BIAS, tile, pdl)
        return out
    partial = torch.empty((splits, m, n), device=x.device, dtype=torch.float32)
    _launch_product(x, weight, bias, partial, _PARTIAL, tile, pdl)
    block = min(1024, triton.next_power_of_2(n))
    _sum_bias[(m, triton.cdiv(n, block))](partial, splits, bias, out, m, n, GELU=gelu,
                                          BLOCK=block, PDL=pdl, num_warps=4, launch_pdl=pdl)
    return out


def product_add_norm_triton(x, weight, bias, residual, gamma, beta, eps: float, tile: Tile,
                            pdl: bool) -> torch.Tensor:
    x, weight = _ready(x, weight)
    (m, k), n = x.shape, weight.shape[0]
    if m == 0 or n == 0 or k == 0:
        return reference_product_add_norm(x, weight, bias, residual, gamma, beta, eps)
    residual = residual.contiguous()
    out = residual.new_empty((m, n))
    _, splits = _slices(k, tile)
    partial = torch.empty((splits, m, n), device=x.device, dtype=torch.float32)
    _launch_product(x, weight, bias, partial, _PARTIAL, tile, pdl)
    _add_norm[(m,)](partial, splits, bias, residual, gamma, beta, out, m, n, eps,
                    BLOCK=triton.next_power_of_2(n), PDL=pdl, num_warps=4, launch_pdl=pdl)
    return out
