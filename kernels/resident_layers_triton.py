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

With FOLD (tried against the seven steps above; off by default), the two norm steps and their
barriers go: the last of a column tile's SPLIT programs to arrive (a counter a tile) adds the
partials, bias and residual for that tile, stores the sum before its norm and each row's mean
and spread over the tile's columns; the products that read a normed activation (the next QKV,
the up product) and the residuals normalize it as they load it, from the rows' statistics.
Five barriers a layer, and one LayerNorm pass after the last.

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
def _row_stats(stats_ptr, tiles, N, eps, BM: tl.constexpr):
    """Each of BM rows' mean and 1 / std over N columns, from `tiles` tiles' (mean, sum of
    squared deviations) pairs ([tiles, BM, 2] float32, N // tiles columns each), combined as
    Chan's parallel variance does; one tile at a time, so a row's pairs take no registers."""
    rows = tl.arange(0, BM)
    total = tl.zeros((BM,), dtype=tl.float32)
    for t in range(tiles):
        total += tl.load(stats_ptr + (t * BM + rows) * 2, cache_modifier=".cg")
    mean = total / tiles
    spread = tl.zeros((BM,), dtype=tl.float32)
    for t in range(tiles):
        at = stats_ptr + (t * BM + rows) * 2
        apart = tl.load(at, cache_modifier=".cg") - mean
        spread += tl.load(at + 1, cache_modifier=".cg") + (N // tiles) * apart * apart
    return mean, 1.0 / tl.sqrt(spread / N + eps)


@triton.jit
def _normed(x, mean, rstd, g_ptr, b_ptr, cols):
    """LayerNorm's output for pre-norm values x [BM, len(cols)] (float32) of columns `cols`."""
    g = tl.load(g_ptr + cols).to(tl.float32)
    b = tl.load(b_ptr + cols).to(tl.float32)
    return (x - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :]


@triton.jit
def _finish_tile(partial_ptr, bias_ptr, res_ptr, res_norm, res_stats, res_g, res_b, out_ptr,
                 stats_ptr, tile, M, N, eps, BM: tl.constexpr, BN: tl.constexpr,
                 SPLIT: tl.constexpr):
    """A column tile's sum before its LayerNorm: the SPLIT partials + bias + residual (normed
    from its statistics when `res_norm`), stored in out's dtype, with each row's mean and sum
    of squared deviations over the tile's BN columns in stats [tile, row]."""
    rows = tl.arange(0, BM)
    cols = tile * BN + tl.arange(0, BN)
    mask = rows[:, None] < M
    at = rows[:, None] * N + cols[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32) + tl.load(bias_ptr + cols).to(tl.float32)[None, :]
    for s in range(SPLIT):
        acc += tl.load(partial_ptr + s * M * N + at, mask=mask, other=0.0, cache_modifier=".cg")
    res = tl.load(res_ptr + at, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
    if res_norm:
        mean, rstd = _row_stats(res_stats, N // BN, N, eps, BM)
        res = _normed(res, mean, rstd, res_g, res_b, cols)
    acc += res
    tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=mask)
    mean_t = tl.sum(acc, axis=1) / BN
    apart = acc - mean_t[:, None]
    where = stats_ptr + (tile * BM + rows) * 2
    tl.store(where, mean_t)
    tl.store(where + 1, tl.sum(apart * apart, axis=1))


@triton.jit
def _product(a_src, lda, w_src, w_row0, b_ptr, out_ptr, M, N, K, pid, programs,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
             PARTIAL: tl.constexpr, GELU: tl.constexpr, TMA: tl.constexpr,
             NORM_A: tl.constexpr = False, norm_a=False, a_mean=None, a_rstd=None, a_g=None,
             a_b=None, FOLD: tl.constexpr = False, count_ptr=None, target=0, res_ptr=None,
             res_norm=False, res_stats=None, res_g=None, res_b=None, pre_ptr=None,
             stats_ptr=None, eps=0.0):
    """out = a[:M, :K] w[w_row0:w_row0 + N]^T: with PARTIAL float32 partial sums [SPLIT, M, N],
    one per slice of K; otherwise (SPLIT 1) plus bias (and GELU) in out's dtype [M, N]. With
    TMA, a_src and w_src are tensor descriptors (blocks [BM, BK] and [BN, BK]; rows past M load
    as zeros), else pointers. With NORM_A (SPLIT 1) and `norm_a`, a holds sums x before a
    LayerNorm (rows' a_mean, a_rstd; the norm's a_g, a_b) and the product is that norm's:
    sum_k ((x_k - mean) rstd g_k + b_k) w_nk = rstd (sum_k x_k g_k w_nk - mean sum_k g_k w_nk)
    + sum_k b_k w_nk. So the gain scales the [BN, BK] weight tile as loaded, not the [BM, BK]
    activation tile (a quarter of the registers at BN 32), and the two column sums beside it
    finish the norm in the epilogue. With FOLD (PARTIAL), the program whose slice brings a
    column tile's counter (count_ptr) to `target` finishes the tile (_finish_tile, bias b_ptr,
    into pre_ptr and stats_ptr)."""
    tiles = N // BN
    k_len = K // SPLIT
    rows = tl.arange(0, BM)
    for item in range(pid, tiles * SPLIT, programs):
        cols = (item % tiles) * BN + tl.arange(0, BN)
        k_start = (item // tiles) * k_len
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        gained = tl.zeros((BN,), dtype=tl.float32)   # sum_k g_k w_nk, as rounded for the dot
        shifted = tl.zeros((BN,), dtype=tl.float32)  # sum_k b_k w_nk
        for k0 in range(k_start, k_start + k_len, BK):
            ks = k0 + tl.arange(0, BK)
            if TMA:
                a = a_src.load([0, k0])
                w = w_src.load([w_row0 + (item % tiles) * BN, k0])
            else:
                a = tl.load(a_src + rows[:, None] * lda + ks[None, :], mask=rows[:, None] < M,
                            other=0.0, cache_modifier=".cg")
                w = tl.load(w_src + (w_row0 + cols)[:, None] * K + ks[None, :])
            if NORM_A:
                if norm_a:
                    plain = w.to(tl.float32)
                    w = (plain * tl.load(a_g + ks).to(tl.float32)[None, :]).to(w.dtype)
                    gained += tl.sum(w.to(tl.float32), axis=1)
                    shifted += tl.sum(plain * tl.load(a_b + ks).to(tl.float32)[None, :], axis=1)
            acc = tl.dot(a, tl.trans(w), acc)
        mask = rows[:, None] < M
        if not PARTIAL:
            if NORM_A:
                if norm_a:
                    acc = (a_rstd[:, None] * (acc - a_mean[:, None] * gained[None, :])
                           + shifted[None, :])
            acc += tl.load(b_ptr + cols).to(tl.float32)[None, :]
            if GELU:
                acc = _gelu_tanh(acc)
            tl.store(out_ptr + rows[:, None] * N + cols[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(out_ptr + (item // tiles) * M * N + rows[:, None] * N + cols[None, :], acc,
                     mask=mask)
            if FOLD:
                tl.debug_barrier()  # every thread's partial stored before the count
                arrived = tl.atomic_add(count_ptr + item % tiles, 1, sem="acq_rel", scope="gpu")
                tl.debug_barrier()
                if arrived == target - 1:
                    _finish_tile(out_ptr, b_ptr, res_ptr, res_norm, res_stats, res_g, res_b,
                                 pre_ptr, stats_ptr, item % tiles, M, N, eps, BM, BN, SPLIT)


@triton.jit
def _add_norm(partial_ptr, bias_ptr, residual_ptr, gamma_ptr, beta_ptr, out_ptr, M, N, eps,
              pid, programs, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """out = LayerNorm(sum of the SPLIT partials + bias + residual), row by row; with SPLIT 0,
    LayerNorm(residual) (out may be residual)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    for row in range(pid, M, programs):
        x = tl.load(residual_ptr + row * N + cols, mask=mask, other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        if SPLIT > 0:
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
                 partial_buf, sync_ptr, counts, x_stats, h_stats, M, H, FF, heads, layer_count,
                 eps, scale, BM: tl.constexpr, BK: tl.constexpr, BN_QKV: tl.constexpr,
                 BN_O: tl.constexpr, SPLIT_O: tl.constexpr, BN_UP: tl.constexpr,
                 BN_DOWN: tl.constexpr, SPLIT_DOWN: tl.constexpr, BLOCK_H: tl.constexpr,
                 BQ: tl.constexpr, D: tl.constexpr, SEQ_BLOCK: tl.constexpr, TMA: tl.constexpr,
                 FENCE: tl.constexpr, ATTENTION: tl.constexpr, FOLD: tl.constexpr):
    """Every layer, in place on x [M, H]; `sync_ptr` a zeroed int32. a_* and the weights are
    what the products load from: the buffers and stacked weights ([layers * N, K]) themselves,
    or with TMA their tensor descriptors. Without ATTENTION (benchmarks/layer_chain_gpu.py)
    the attention step is left out and a_attn is the QKV buffer, its first H columns the
    output product's input. With FOLD (BN_O == BN_DOWN): `counts` two zeroed int32 counters a
    column tile (the output product's, then the down product's), x_stats and h_stats
    [H // BN_O, BM, 2] float32 (the first layer reads none of x_stats' values)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    barrier = 1
    if FOLD:
        tiles = H // BN_O
        for layer in range(layer_count):
            # from the second layer on, x holds the previous layer's sums before its last norm
            x_pre = layer > 0
            g_x, b_x = g2 + (layer - 1) * H, b2 + (layer - 1) * H
            x_mean, x_rstd = _row_stats(x_stats, tiles, H, eps, BM)
            _product(a_x, H, qkv_w, layer * 3 * H, qkv_b + layer * 3 * H, qkv_buf, M, 3 * H, H,
                     pid, programs, BM, BN_QKV, BK, 1, False, False, TMA, NORM_A=True,
                     norm_a=x_pre, a_mean=x_mean, a_rstd=x_rstd, a_g=g_x, a_b=b_x)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            if ATTENTION:
                _attention(qkv_buf, attn_buf, cu_ptr, seqs, M, H, heads, scale, pid, programs,
                           BM, BQ, D, SEQ_BLOCK)
                barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            _product(a_attn, attn_lda, o_w, layer * H, o_b + layer * H, partial_buf, M, H, H,
                     pid, programs, BM, BN_O, BK, SPLIT_O, True, False, TMA, FOLD=True,
                     count_ptr=counts, target=(layer + 1) * SPLIT_O, res_ptr=x_ptr,
                     res_norm=x_pre, res_stats=x_stats, res_g=g_x, res_b=b_x, pre_ptr=h_buf,
                     stats_ptr=h_stats, eps=eps)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            h_mean, h_rstd = _row_stats(h_stats, tiles, H, eps, BM)
            _product(a_h, H, up_w, layer * FF, up_b + layer * FF, u_buf, M, FF, H, pid,
                     programs, BM, BN_UP, BK, 1, False, True, TMA, NORM_A=True, norm_a=True,
                     a_mean=h_mean, a_rstd=h_rstd, a_g=g1 + layer * H, a_b=b1 + layer * H)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            _product(a_u, FF, down_w, layer * H, down_b + layer * H, partial_buf, M, H, FF,
                     pid, programs, BM, BN_DOWN, BK, SPLIT_DOWN, True, False, TMA, FOLD=True,
                     count_ptr=counts + tiles, target=(layer + 1) * SPLIT_DOWN, res_ptr=h_buf,
                     res_norm=True, res_stats=h_stats, res_g=g1 + layer * H,
                     res_b=b1 + layer * H, pre_ptr=x_ptr, stats_ptr=x_stats, eps=eps)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
        _add_norm(partial_buf, down_b, x_ptr, g2 + (layer_count - 1) * H,
                  b2 + (layer_count - 1) * H, x_ptr, M, H, eps, pid, programs, 0, BLOCK_H)
    else:
        for layer in range(layer_count):
            _product(a_x, H, qkv_w, layer * 3 * H, qkv_b + layer * 3 * H, qkv_buf, M, 3 * H, H,
                     pid, programs, BM, BN_QKV, BK, 1, False, False, TMA)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            if ATTENTION:
                _attention(qkv_buf, attn_buf, cu_ptr, seqs, M, H, heads, scale, pid, programs, BM,
                           BQ, D, SEQ_BLOCK)
                barrier = _step_done(sync_ptr, barrier, programs, FENCE)
            _product(a_attn, attn_lda, o_w, layer * H, o_b, partial_buf, M, H, H, pid, programs,
                     BM, BN_O, BK, SPLIT_O, True, False, TMA)
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
            _add_norm(partial_buf, down_b + layer * H, h_buf, g2 + layer * H, b2 + layer * H,
                      x_ptr, M, H, eps, pid, programs, SPLIT_DOWN, BLOCK_H)
            barrier = _step_done(sync_ptr, barrier, programs, FENCE)


def bert_layers_triton(x, cu_seqlens, w, heads, eps, tiles, programs):
    """Run every layer on x [M <= BM, H] (a new tensor; x is not written). `w` holds the
    stacked weights (kernels/resident_layers.py, STACKED); `tiles` the block sizes (and
    ATTENTION, default on: off, the output product reads the QKV product's first H columns;
    FOLD, default off: the norms folded into the products, five barriers a layer).
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
    fold = tiles.get("FOLD", False)
    if fold:
        if tiles["BN_O"] != tiles["BN_DOWN"]:
            raise ValueError("FOLD needs the output and down products' column tiles equal")
        column_tiles = hidden // tiles["BN_O"]
        counts = torch.zeros(2 * column_tiles, device=x.device, dtype=torch.int32)
        x_stats, h_stats = torch.empty(2, column_tiles, bm, 2, device=x.device,
                                       dtype=torch.float32)
    else:  # unread: nothing allocated (or zeroed in a captured graph) for them
        counts, x_stats, h_stats = sync, partial, partial
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
        partial, sync, counts, x_stats, h_stats, m, hidden, ff, heads, layers, eps,
        head_dim ** -0.5, BM=bm, BK=tiles["BK"], BN_QKV=tiles["BN_QKV"],
        BN_O=tiles["BN_O"], SPLIT_O=tiles["SPLIT_O"], BN_UP=tiles["BN_UP"],
        BN_DOWN=tiles["BN_DOWN"], SPLIT_DOWN=tiles["SPLIT_DOWN"],
        BLOCK_H=triton.next_power_of_2(hidden), BQ=tiles["BQ"], D=head_dim,
        SEQ_BLOCK=max(2, triton.next_power_of_2(seqs)), TMA=tma, FENCE=tma and x.is_cuda,
        ATTENTION=attention, FOLD=fold, num_warps=tiles["warps"], num_stages=tiles["stages"],
        launch_cooperative_grid=x.is_cuda)
    return y[:m], sync
