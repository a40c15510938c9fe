"""The Triton side of kernels/resident_layers.py: every layer of a BERT-family encoder over at
most BM tokens in one launch whose programs stay resident, one an SM. Imported only when a CUDA
tensor arrives (and by tests in the interpreter, as one program whose waits pass at once).

Steps a layer, each split into tiles that every program takes every n-th of:
1. qkv = x Wqkv^T + b                       (tiles of BN_QKV columns over all of K)
2. attention per head, within each sequence (BQ queries of one head a program; the tokens'
   sequences come from cu_seqlens)
3. partials = attn Wo^T                     (BN_O columns x SPLIT_O slices of K, float32)
4. h = LayerNorm(sum partials + bo + x)     (one row a program)
5. u = gelu_tanh(h Wup^T + bup)             (BN_UP columns over all of K)
6. partials = u Wdown^T                     (BN_DOWN columns x SPLIT_DOWN slices of K)
7. x = LayerNorm(sum partials + bdown + h)

A norm needs every column of its rows, and the product after it every row, so steps 3, 4, 6
and 7 end at a barrier of the whole grid. The other steps wait only for what they read:
counters that each tile counts up once stored (a head's QKV tiles for its attention, a slice
of K's heads for the output product, its up tiles for the down product), so a program starts
on its next tile while others finish theirs. Counters are released and acquired at GPU scope;
each program counts its own barrier flag, so no two arrivals queue at one address.

Products load their operands through tensor descriptors (TMA) or, with TMA off (the
interpreter), through pointers; a proxy fence on both sides of each count orders the plain
stores before it with the TMA loads after it.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _fence_acquire():
    """After relaxed reads that saw a release: this thread sees what came before it."""
    tl.inline_asm_elementwise("fence.acq_rel.gpu;\n mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _proxy_fence():
    """Order this thread's plain global accesses with its TMA ones (another memory proxy)."""
    tl.inline_asm_elementwise("fence.proxy.async.global;\n mov.u32 $0, 0;", "=r", [],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _signal(counter_ptr, CUDA: tl.constexpr, PROXY: tl.constexpr):
    """Count one finished piece of work: whoever waits for the count sees every store this
    program made before it (release)."""
    tl.debug_barrier()
    if CUDA and PROXY:
        _proxy_fence()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _wait(counter_ptrs, mask, target, CUDA: tl.constexpr, PROXY: tl.constexpr):
    """Wait until every counter under `mask` has reached `target`, then see every store made
    before their signals (acquire)."""
    while tl.min(tl.load(counter_ptrs, mask=mask, other=target, volatile=True), axis=0) < target:
        pass
    if CUDA:
        _fence_acquire()
        if PROXY:
            _proxy_fence()
    tl.debug_barrier()


@triton.jit
def _wait_span(counter_ptr, start, length, per_counter, target, BLOCK: tl.constexpr,
               CUDA: tl.constexpr, PROXY: tl.constexpr):
    """_wait for the counters of columns [start, start + length), per_counter columns each."""
    first = start // per_counter
    span = tl.arange(0, BLOCK)
    _wait(counter_ptr + first + span, span <= (start + length - 1) // per_counter - first,
          target, CUDA, PROXY)


@triton.jit
def _grid_sync(flags_ptr, barrier, programs, P_BLOCK: tl.constexpr, CUDA: tl.constexpr,
               PROXY: tl.constexpr):
    """The barrier that ends step number `barrier` (from 1): each program counts its own flag
    up, so no two programs' arrivals queue at one address, then waits for all the others';
    returns the next step's number."""
    _signal(flags_ptr + tl.program_id(0), CUDA, PROXY)
    everyone = tl.arange(0, P_BLOCK)
    _wait(flags_ptr + everyone, everyone < programs, barrier, CUDA, PROXY)
    return barrier + 1


@triton.jit
def _gelu_tanh(x):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))


@triton.jit
def _product(a_src, lda, w_src, w_row0, b_ptr, out_ptr, M, N, K, pid, programs, ready_ptr,
             ready_cols, ready_target, done_ptr, done_cols,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
             PARTIAL: tl.constexpr, GELU: tl.constexpr, TMA: tl.constexpr,
             READY_BLOCK: tl.constexpr, CUDA: tl.constexpr):
    """out = a[:M, :K] w[w_row0:w_row0 + N]^T: with PARTIAL float32 partial sums [SPLIT, M, N],
    one per slice of K; otherwise (SPLIT 1) plus bias (and GELU) in out's dtype [M, N]. With
    TMA, a_src and w_src are tensor descriptors (blocks [BM, BK] and [BN, BK]; rows past M load
    as zeros), else pointers. Before a tile reads its slice of a, it waits for that slice's
    counters at ready_ptr (one per ready_cols columns of a) to reach ready_target; after it is
    stored, it counts itself at done_ptr (one counter per done_cols columns of out). READY_BLOCK
    0: no wait (a barrier came before)."""
    tiles = N // BN
    k_len = K // SPLIT
    rows = tl.arange(0, BM)
    for item in range(pid, tiles * SPLIT, programs):
        n0 = (item % tiles) * BN
        cols = n0 + tl.arange(0, BN)
        k_start = (item // tiles) * k_len
        if READY_BLOCK > 0:
            _wait_span(ready_ptr, k_start, k_len, ready_cols, ready_target, READY_BLOCK, CUDA,
                       TMA)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(k_start, k_start + k_len, BK):
            if TMA:
                a = a_src.load([0, k0])
                w = w_src.load([w_row0 + n0, k0])
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
            _signal(done_ptr + n0 // done_cols, CUDA, TMA)
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
def _attention(qkv_ptr, out_ptr, cu_ptr, seqs, M, H, heads, scale, pid, programs, qkv_done,
               qkv_target, head_done, BM: tl.constexpr, BQ: tl.constexpr, D: tl.constexpr,
               SEQ_BLOCK: tl.constexpr, BN_QKV: tl.constexpr, HEAD_TILES: tl.constexpr,
               CUDA: tl.constexpr, TMA: tl.constexpr):
    """out[:, head] = softmax(q k^T * scale) v within each sequence, BQ queries of one head a
    program, each once its head's query, key and value tiles of the QKV product have counted
    qkv_target at qkv_done; each block counts itself at head_done[head]. qkv is [M, 3H]
    (queries, keys, values, each heads x D); HEAD_TILES QKV tiles hold one head's queries."""
    rows = tl.arange(0, BM)
    slots = tl.arange(0, SEQ_BLOCK)
    ends = tl.load(cu_ptr + 1 + slots, mask=slots < seqs, other=2 ** 30)
    key_seq = tl.sum((ends[None, :] <= rows[:, None]).to(tl.int32), axis=1)  # each token's
    dims = tl.arange(0, D)
    key_live = rows[:, None] < M
    parts = tl.arange(0, 4 * HEAD_TILES)
    for item in range(pid, heads * (BM // BQ), programs):
        head = item % heads
        part = parts // HEAD_TILES  # queries, keys, values (and a fourth, masked)
        tile = (part * H + head * D) // BN_QKV + parts % HEAD_TILES
        _wait(qkv_done + tile, part < 3, qkv_target, CUDA, False)
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
        _signal(head_done + head, CUDA, TMA)


@triton.jit
def _bert_layers(x_ptr, a_x, cu_ptr, seqs, qkv_w, qkv_b, o_w, o_b, g1, b1, up_w, up_b, down_w,
                 down_b, g2, b2, qkv_buf, attn_buf, a_attn, attn_lda, h_buf, a_h, u_buf, a_u,
                 partial_buf, flags, qkv_done, head_done, up_done, M, H, FF, heads, layer_count,
                 eps, scale, BM: tl.constexpr, BK: tl.constexpr, BN_QKV: tl.constexpr,
                 BN_O: tl.constexpr, SPLIT_O: tl.constexpr, BN_UP: tl.constexpr,
                 BN_DOWN: tl.constexpr, SPLIT_DOWN: tl.constexpr, BLOCK_H: tl.constexpr,
                 BQ: tl.constexpr, D: tl.constexpr, SEQ_BLOCK: tl.constexpr, TMA: tl.constexpr,
                 CUDA: tl.constexpr, ATTENTION: tl.constexpr, P_BLOCK: tl.constexpr,
                 HEAD_TILES: tl.constexpr, O_BLOCK: tl.constexpr, DOWN_BLOCK: tl.constexpr):
    """Every layer, in place on x [M, H]. a_* and the weights are what the products load from:
    the buffers and stacked weights ([layers * N, K]) themselves, or with TMA their tensor
    descriptors. `flags` (P_BLOCK, one a program, for the barriers), qkv_done (one a QKV
    tile), head_done (one a head) and up_done (one a slice of the down product's K) are zeroed
    int32 counters. Without ATTENTION (benchmarks/layer_chain_gpu.py) the attention step is
    left out and a_attn is the QKV buffer, its first H columns the output product's input."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    barrier = 1
    blocks = BM // BQ
    down_k = FF // SPLIT_DOWN
    for layer in range(layer_count):
        # QKV; attention starts on a head once its tiles are in; the output product on a slice
        # of K once its heads are (without attention: once its QKV tiles are)
        _product(a_x, H, qkv_w, layer * 3 * H, qkv_b + layer * 3 * H, qkv_buf, M, 3 * H, H,
                 pid, programs, flags, 1, 0, qkv_done, BN_QKV, BM, BN_QKV, BK, 1, False, False,
                 TMA, 0, CUDA)
        if ATTENTION:
            _attention(qkv_buf, attn_buf, cu_ptr, seqs, M, H, heads, scale, pid, programs,
                       qkv_done, layer + 1, head_done, BM, BQ, D, SEQ_BLOCK, BN_QKV, HEAD_TILES,
                       CUDA, TMA)
            _product(a_attn, attn_lda, o_w, layer * H, o_b, partial_buf, M, H, H, pid,
                     programs, head_done, D, (layer + 1) * blocks, flags, 1, BM, BN_O, BK,
                     SPLIT_O, True, False, TMA, O_BLOCK, CUDA)
        else:
            _product(a_attn, attn_lda, o_w, layer * H, o_b, partial_buf, M, H, H, pid,
                     programs, qkv_done, BN_QKV, layer + 1, flags, 1, BM, BN_O, BK, SPLIT_O,
                     True, False, TMA, O_BLOCK, CUDA)
        barrier = _grid_sync(flags, barrier, programs, P_BLOCK, CUDA, TMA)
        _add_norm(partial_buf, o_b + layer * H, x_ptr, g1 + layer * H, b1 + layer * H, h_buf,
                  M, H, eps, pid, programs, SPLIT_O, BLOCK_H)
        barrier = _grid_sync(flags, barrier, programs, P_BLOCK, CUDA, TMA)
        # up; the down product starts on a slice of K once its up tiles are in
        _product(a_h, H, up_w, layer * FF, up_b + layer * FF, u_buf, M, FF, H, pid, programs,
                 flags, 1, 0, up_done, down_k, BM, BN_UP, BK, 1, False, True, TMA, 0, CUDA)
        _product(a_u, FF, down_w, layer * H, down_b, partial_buf, M, H, FF, pid, programs,
                 up_done, down_k, (layer + 1) * (down_k // BN_UP), flags, 1, BM, BN_DOWN, BK,
                 SPLIT_DOWN, True, False, TMA, DOWN_BLOCK, CUDA)
        barrier = _grid_sync(flags, barrier, programs, P_BLOCK, CUDA, TMA)
        _add_norm(partial_buf, down_b + layer * H, h_buf, g2 + layer * H, b2 + layer * H, x_ptr,
                  M, H, eps, pid, programs, SPLIT_DOWN, BLOCK_H)
        barrier = _grid_sync(flags, barrier, programs, P_BLOCK, CUDA, TMA)


# Barriers a layer: after the output product, its norm, the down product and its norm.
BARRIERS_A_LAYER = 4


def _wait_block(length: int, per_counter: int) -> int:
    """The counters a span of `length` columns can touch, as a power of two."""
    return triton.next_power_of_2(-(-length // per_counter) + 1)


def bert_layers_triton(x, cu_seqlens, w, heads, eps, tiles, programs):
    """Run every layer on x [M <= BM, H] (a new tensor; x is not written). `w` holds the
    stacked weights (kernels/resident_layers.py, STACKED); `tiles` the block sizes (and
    ATTENTION, default on: off, the output product reads the QKV product's first H columns).
    Returns (the output, the per-program barrier counters: BARRIERS_A_LAYER a layer each)."""
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
    # one zeroed buffer (one memset) for every counter: the barriers', the QKV tiles', the
    # heads' and the down product's K slices'
    p_block = max(2, triton.next_power_of_2(programs))
    sizes = (p_block, 3 * hidden // tiles["BN_QKV"], heads, tiles["SPLIT_DOWN"])
    flags, qkv_done, head_done, up_done = torch.zeros(
        sum(sizes), device=x.device, dtype=torch.int32).split(sizes)
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
    o_k = hidden // tiles["SPLIT_O"]
    _bert_layers[(programs,)](
        y, a["x"], cu_seqlens, seqs, weights["qkv_w"], w["qkv_b"], weights["o_w"], w["o_b"],
        w["g1"], w["b1"], weights["up_w"], w["up_b"], weights["down_w"], w["down_b"], w["g2"],
        w["b2"], qkv, attn, a["attn"], hidden if attention else 3 * hidden, h, a["h"], u, a["u"],
        partial, flags, qkv_done, head_done, up_done, m, hidden, ff, heads, layers, eps,
        head_dim ** -0.5, BM=bm, BK=tiles["BK"], BN_QKV=tiles["BN_QKV"],
        BN_O=tiles["BN_O"], SPLIT_O=tiles["SPLIT_O"], BN_UP=tiles["BN_UP"],
        BN_DOWN=tiles["BN_DOWN"], SPLIT_DOWN=tiles["SPLIT_DOWN"],
        BLOCK_H=triton.next_power_of_2(hidden), BQ=tiles["BQ"], D=head_dim,
        SEQ_BLOCK=max(2, triton.next_power_of_2(seqs)), TMA=tma, CUDA=x.is_cuda,
        ATTENTION=attention, P_BLOCK=p_block, HEAD_TILES=max(1, head_dim // tiles["BN_QKV"]),
        O_BLOCK=_wait_block(o_k, head_dim if attention else tiles["BN_QKV"]),
        DOWN_BLOCK=_wait_block(ff // tiles["SPLIT_DOWN"], ff // tiles["SPLIT_DOWN"]),
        num_warps=tiles["warps"], num_stages=tiles["stages"], launch_cooperative_grid=x.is_cuda)
    return y[:m], flags[:programs]
