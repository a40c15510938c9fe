"""The Triton side of kernels/resident_layers.py: every layer of a BERT-family encoder over at
most BM tokens in one launch whose programs stay resident, one an SM, and meet at a barrier
between the steps of a layer. Imported only when a CUDA tensor arrives (and by tests in the
interpreter, as one program whose barriers pass at once).

Steps a layer, each split into tiles that every program takes every n-th of:
1. qkv = x Wqkv^T + b                       (tiles of BN_QKV columns over all of K)
2. attention per head, within each sequence (one head a program; the tokens' sequences come
   from cu_seqlens)
3. partials = attn Wo^T                     (BN_O columns x SPLIT_O slices of K, float32)
4. h = LayerNorm(sum partials + bo + x)     (one row a program)
5. u = gelu_tanh(h Wup^T + bup)             (BN_UP columns over all of K)
6. partials = u Wdown^T                     (BN_DOWN columns x SPLIT_DOWN slices of K)
7. x = LayerNorm(sum partials + bdown + h)

Products load their operands through tensor descriptors (TMA) or, with TMA off (the
interpreter), through pointers; a proxy fence at each barrier orders the plain stores before it
with the TMA loads after it.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _grid_sync(sync_ptr, target):
    """Wait until the counter reaches `target` (every program has arrived); every store a
    program made before it is visible to every program after it."""
    tl.debug_barrier()
    tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    while tl.load(sync_ptr, volatile=True) < target:
        pass
    tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _proxy_fence():
    """Order this thread's plain global accesses with its TMA ones (another memory proxy)."""
    tl.inline_asm_elementwise("fence.proxy.async.global;\n mov.u32 $0, 0;", "=r", [],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _step_done(sync_ptr, barrier, programs, FENCE: tl.constexpr):
    """The barrier that ends step number `barrier`; returns the next step's number."""
    if FENCE:
        _proxy_fence()
    _grid_sync(sync_ptr, barrier * programs)
    if FENCE:
        _proxy_fence()
    return barrier + 1


@triton.jit
def _gelu_tanh(x):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))


@triton.jit
def _product(a_src, lda, w_src, w_row0, b_ptr, out_ptr, M, N, K, pid, programs,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
             PARTIAL: tl.constexpr, GELU: tl.constexpr, TMA: tl.constexpr):
    """out = a[:M, :K] w[w_row0:w_row0 + N]^T: with PARTIAL float32 partial sums [SPLIT, M, N],
    one per slice of K; otherwise (SPLIT 1) plus bias (and GELU) in out's dtype [M, N]. With
    TMA, a_src and w_src are tensor descriptors (blocks [BM, BK] and [BN, BK]; rows past M load
    as zeros), else pointers."""
    tiles = N // BN
    k_len = K // SPLIT
    rows = tl.arange(0, BM)
    for item in range(pid, tiles * SPLIT, programs):
        cols = (item % tiles) * BN + tl.arange(0, BN)
        k_start = (item // tiles) * k_len
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(k_start, k_start + k_len, BK):
            if TMA:
                a = a_src.load([0, k0])
                w = w_src.load([w_row0 + (item % tiles) * BN, k0])
            else:
                ks = k0 + tl.arange(0, BK)
                a = tl.load(a_src + rows[:, None] * lda + ks[None, :], mask=rows[:, None] < M,
                            other=0.0, cache_modifier=".cg")
                w = tl.load(w_src + (w_row0 + cols)[:, None] * K + ks[None, :])
            acc = tl.dot(a, tl.trans(w), acc)
        mask = rows[:, None] < M
        if not PARTIAL:
            acc += tl.load(b_ptr + cols).to(tl.float32)[None, :]
            if GELU:
                acc = _gelu_tanh(acc)
            tl.store(out_ptr + rows[:, None] * N + cols[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(out_ptr + (item // tiles) * M * N + rows[:, None] * N + cols[None, :], acc,
                     mask=mask)


@triton.jit
def _add_norm(partial_ptr, bias_ptr, residual_ptr, gamma_ptr, beta_ptr, out_ptr, M, N, eps,
              pid, programs, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """out = LayerNorm(sum of the SPLIT partials + bias + residual), row by row."""
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    for row in range(pid, M, programs):
        x = tl.load(residual_ptr + row * N + cols, mask=mask, other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        x += tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        for s in range(SPLIT):
            x += tl.load(partial_ptr + s * M * N + row * N + cols, mask=mask, other=0.0,
                         cache_modifier=".cg")
        mean = tl.sum(x, axis=0) / N
        centred = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)
        y = centred * rstd * tl.load(gamma_ptr + cols, mask=mask).to(tl.float32)
        y += tl.load(beta_ptr + cols, mask=mask).to(tl.float32)
        tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _attention(qkv_ptr, out_ptr, cu_ptr, seqs, M, H, heads, scale, pid, programs,
               BM: tl.constexpr, BQ: tl.constexpr, D: tl.constexpr, SEQ_BLOCK: tl.constexpr):
    """out[:, head] = softmax(q k^T * scale) v within each sequence, BQ queries of one head a
    program; qkv is [M, 3H] (queries, keys, values, each heads x D)."""
    rows = tl.arange(0, BM)
    slots = tl.arange(0, SEQ_BLOCK)
    ends = tl.load(cu_ptr + 1 + slots, mask=slots < seqs, other=2 ** 30)
    key_seq = tl.sum((ends[None, :] <= rows[:, None]).to(tl.int32), axis=1)  # each token's
    dims = tl.arange(0, D)
    key_live = rows[:, None] < M
    for item in range(pid, heads * (BM // BQ), programs):
        head = item % heads
        queries = (item // heads) * BQ + tl.arange(0, BQ)
        query_seq = tl.sum((ends[None, :] <= queries[:, None]).to(tl.int32), axis=1)
        # queries past M (never stored) see every key, so no row is all -inf
        same = (((query_seq[:, None] == key_seq[None, :]) | (queries[:, None] >= M))
                & (rows[None, :] < M))
        keys = qkv_ptr + rows[:, None] * (3 * H) + head * D + dims[None, :]
        q = tl.load(qkv_ptr + queries[:, None] * (3 * H) + head * D + dims[None, :],
                    mask=queries[:, None] < M, other=0.0, cache_modifier=".cg")
        k = tl.load(keys + H, mask=key_live, other=0.0, cache_modifier=".cg")
        v = tl.load(keys + 2 * H, mask=key_live, other=0.0, cache_modifier=".cg")
        scores = tl.where(same, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
        weights = tl.exp(scores - tl.max(scores, axis=1)[:, None])
        weights = weights / tl.sum(weights, axis=1)[:, None]
        out = tl.dot(weights.to(v.dtype), v)
        tl.store(out_ptr + queries[:, None] * H + head * D + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=queries[:, None] < M)


@triton.jit
def _bert_layers(x_ptr, a_x, cu_ptr, seqs, qkv_w, qkv_b, o_w, o_b, g1, b1, up_w, up_b, down_w,
                 down_b, g2, b2, qkv_buf, attn_buf, a_attn, attn_lda, h_buf, a_h, u_buf, a_u,
                 partial_buf, sync_ptr, M, H, FF, heads, layer_count, eps, scale,
                 BM: tl.constexpr, BK: tl.constexpr, BN_QKV: tl.constexpr, BN_O: tl.constexpr,
                 SPLIT_O: tl.constexpr, BN_UP: tl.constexpr, BN_DOWN: tl.constexpr,
                 SPLIT_DOWN: tl.constexpr, BLOCK_H: tl.constexpr, BQ: tl.constexpr, D: tl.constexpr,
                 SEQ_BLOCK: tl.constexpr, TMA: tl.constexpr, FENCE: tl.constexpr,
                 ATTENTION: tl.constexpr):
    """Every layer, in place on x [M, H]; `sync_ptr` a zeroed int32. a_* and the weights are
    what the products load from: the buffers and stacked weights ([layers * N, K]) themselves,
    or with TMA their tensor descriptors. Without ATTENTION (benchmarks/layer_chain_gpu.py)
    the attention step is left out and a_attn is the QKV buffer, its first H columns the
    output product's input."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    barrier = 1
    for layer in range(layer_count):
        _product(a_x, H, qkv_w, layer * 3 * H, qkv_b + layer * 3 * H, qkv_buf, M, 3 * H, H,
                 pid, programs, BM, BN_QKV, BK, 1, False, False, TMA)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        if ATTENTION:
            _attention(qkv_buf, attn_buf, cu_ptr, seqs, M, H, heads, scale, pid, programs, BM,
                       BQ, D, SEQ_BLOCK)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _product(a_attn, attn_lda, o_w, layer * H, o_b, partial_buf, M, H, H, pid, programs, BM,
                 BN_O, BK, SPLIT_O, True, False, TMA)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _add_norm(partial_buf, o_b + layer * H, x_ptr, g1 + layer * H, b1 + layer * H, h_buf,
                  M, H, eps, pid, programs, SPLIT_O, BLOCK_H)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _product(a_h, H, up_w, layer * FF, up_b + layer * FF, u_buf, M, FF, H, pid, programs,
                 BM, BN_UP, BK, 1, False, True, TMA)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _product(a_u, FF, down_w, layer * H, down_b, partial_buf, M, H, FF, pid, programs, BM,
                 BN_DOWN, BK, SPLIT_DOWN, True, False, TMA)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _add_norm(partial_buf, down_b + layer * H, h_buf, g2 + layer * H, b2 + layer * H, x_ptr,
                  M, H, eps, pid, programs, SPLIT_DOWN, BLOCK_H)
        barrier = _step_done(sync_ptr, barrier, programs, FENCE)


def bert_layers_triton(x, cu_seqlens, w, heads, eps, tiles, programs):
    """Run every layer on x [M <= BM, H] (a new tensor; x is not written). `w` holds the
    stacked weights (kernels/resident_layers.py, STACKED); `tiles` the block sizes (and
    ATTENTION, default on: off, the output product reads the QKV product's first H columns).
    Returns (the output, the barrier counter)."""
    m, hidden = x.shape
    layers, ff = w["up_w"].shape[0], w["up_w"].shape[1]
    bm = tiles["BM"]
    like = dict(device=x.device, dtype=x.dtype)
    y = torch.empty(bm, hidden, **like)
    y[:m].copy_(x)
    qkv = torch.empty(bm, 3 * hidden, **like)
    attn = torch.empty(bm, hidden, **like)
    h = torch.empty(bm, hidden, **like)
    u = torch.empty(bm, ff, **like)
    split = max(tiles["SPLIT_O"], tiles["SPLIT_DOWN"])
    partial = torch.empty(split, bm, hidden, device=x.device, dtype=torch.float32)
    sync = torch.zeros(1, device=x.device, dtype=torch.int32)
    attention = tiles.get("ATTENTION", True)
    a = dict(x=y[:m], attn=attn[:m] if attention else qkv[:m], h=h[:m], u=u[:m])
    weights = {k: w[k].flatten(0, 1) for k in ("qkv_w", "o_w", "up_w", "down_w")}
    tma = tiles["TMA"]
    if tma:
        a = {k: TensorDescriptor.from_tensor(v, [bm, tiles["BK"]]) for k, v in a.items()}
        weights = {k: TensorDescriptor.from_tensor(v, [tiles[bn], tiles["BK"]])
                   for (k, v), bn in zip(weights.items(), ("BN_QKV", "BN_O", "BN_UP", "BN_DOWN"))}
    seqs = cu_seqlens.shape[0] - 1
    head_dim = hidden // heads
    _bert_layers[(programs,)](
        y, a["x"], cu_seqlens, seqs, weights["qkv_w"], w["qkv_b"], weights["o_w"], w["o_b"],
        w["g1"], w["b1"], weights["up_w"], w["up_b"], weights["down_w"], w["down_b"], w["g2"],
        w["b2"], qkv, attn, a["attn"], hidden if attention else 3 * hidden, h, a["h"], u, a["u"],
        partial, sync, m, hidden, ff, heads, layers, eps, head_dim ** -0.5, BM=bm, BK=tiles["BK"],
        BN_QKV=tiles["BN_QKV"], BN_O=tiles["BN_O"], SPLIT_O=tiles["SPLIT_O"], BN_UP=tiles["BN_UP"],
        BN_DOWN=tiles["BN_DOWN"], SPLIT_DOWN=tiles["SPLIT_DOWN"],
        BLOCK_H=triton.next_power_of_2(hidden), BQ=tiles["BQ"], D=head_dim,
        SEQ_BLOCK=max(2, triton.next_power_of_2(seqs)), TMA=tma, FENCE=tma and x.is_cuda,
        ATTENTION=attention, num_warps=tiles["warps"], num_stages=tiles["stages"],
        launch_cooperative_grid=x.is_cuda)
    return y[:m], sync
