"""Every layer of a BERT-family encoder (post-LayerNorm, GELU MLP) over a batch of at most
MAX_TOKENS tokens in one kernel launch, and its plain-torch reference.

    resident_bert_layers(x [T, H] bf16, cu_seqlens int32 [B+1], stacked weights, heads, eps)
        -> [T, H], x's dtype

Why: at batch 1 a layer is seven kernels, each mostly launch, ramp and drain around a
microsecond of weight reading. One launch of as many programs as the GPU has SMs, meeting at a
barrier between a layer's steps, ran BGE-M3's layers' products and norms at 128 tokens in
30.0 µs a layer against 40.0 for cuBLAS's kernels with the norms unfused, and in the engine,
attention included, took the graph replay at 1 x 128 from 862-866 to 816 µs (an H100;
docs/benchmarks.md, "one persistent kernel for batch 1"). Its steps:
kernels/resident_layers_triton.py.

The weights come stacked, one tensor per kind with the layers first (STACKED): the engine
stacks each model's layers once at load. The GELU is the tanh approximation, as the GPU
engine's epilogue; attention is within each sequence of cu_seqlens (sequences may be empty;
tokens past cu_seqlens[-1] attend among themselves and their rows are never read).

The barrier needs every program resident at once: the launch is cooperative, so a GPU with
fewer free SMs refuses it with an error instead of hanging. `resident_bert_layers` runs the
kernel for CUDA tensors and the reference everywhere else.
"""

import functools

import torch
import torch.nn.functional as F

# The most tokens one launch takes: the products' row tile.
MAX_TOKENS = 128
# The stacked weights, by name: [layers, ...] each.
STACKED = ("qkv_w", "qkv_b", "o_w", "o_b", "g1", "b1", "up_w", "up_b", "down_w", "down_b", "g2",
           "b2")
# The tiles measured fastest on an H100 at BGE-M3's shape: the products' from
# benchmarks/layer_chain_gpu.py's sweep, with 4 pipeline stages (5 leave no shared memory for
# attention), and attention's 16 queries a program (against 32 and a whole head).
TILES = dict(BM=MAX_TOKENS, BK=128, BN_QKV=32, BN_O=32, SPLIT_O=4, BN_UP=32, BN_DOWN=32,
             SPLIT_DOWN=4, BQ=16, warps=4, stages=4)


def tiles_for(hidden: int, ff: int, heads: int) -> dict | None:
    """TILES for a model of these sides, each split-K product in as many slices of K (up to
    TILES') as divide its BK blocks evenly; None when the sides do not fit: H and the
    intermediate size multiples of BK (and of the column tiles), the head dim a power of two of
    at least 16."""
    head_dim, rest = divmod(hidden, heads)
    bk = TILES["BK"]
    if (rest or head_dim < 16 or head_dim & (head_dim - 1) or hidden % bk or ff % bk
            or any(n % TILES[bn] for n, bn in ((3 * hidden, "BN_QKV"), (hidden, "BN_O"),
                                                (ff, "BN_UP"), (hidden, "BN_DOWN")))):
        return None

    def slices(k: int, most: int) -> int:
        return max(s for s in range(1, most + 1) if (k // bk) % s == 0)
    return TILES | dict(SPLIT_O=slices(hidden, TILES["SPLIT_O"]),
                        SPLIT_DOWN=slices(ff, TILES["SPLIT_DOWN"]))


def fits(hidden: int, ff: int, heads: int) -> bool:
    """Whether the kernel runs a model of these sides (tiles_for)."""
    return tiles_for(hidden, ff, heads) is not None


def reference_bert_layers(x, cu_seqlens, w, heads, eps):
    """The layers in plain torch: float32 sums, each step rounded to x's dtype as the kernel's."""
    tokens, hidden = x.shape
    head_dim = hidden // heads
    ends = cu_seqlens[1:].to(torch.long)
    seq = (ends[None, :] <= torch.arange(tokens, device=x.device)[:, None]).sum(1)
    same = seq[:, None] == seq[None, :]
    for i in range(w["qkv_w"].shape[0]):
        qkv = F.linear(x.float(), w["qkv_w"][i].float(), w["qkv_b"][i].float()).to(x.dtype)
        q, k, v = qkv.float().view(tokens, 3, heads, head_dim).unbind(1)
        scores = torch.einsum("thd,shd->hts", q, k) * head_dim ** -0.5
        weights = scores.masked_fill(~same, float("-inf")).softmax(-1)
        attn = torch.einsum("hts,shd->thd", weights.to(x.dtype).float(), v)
        attn = attn.reshape(tokens, hidden).to(x.dtype)
        h = F.layer_norm(F.linear(attn.float(), w["o_w"][i].float(), w["o_b"][i].float())
                         + x.float(), (hidden,), w["g1"][i].float(), w["b1"][i].float(),
                         eps).to(x.dtype)
        u = F.gelu(F.linear(h.float(), w["up_w"][i].float(), w["up_b"][i].float()),
                   approximate="tanh").to(x.dtype)
        x = F.layer_norm(F.linear(u.float(), w["down_w"][i].float(), w["down_b"][i].float())
                         + h.float(), (hidden,), w["g2"][i].float(), w["b2"][i].float(),
                         eps).to(x.dtype)
    return x


def _check(x, cu_seqlens, w, heads):
    if x.dim() != 2 or not 0 < x.shape[0] <= MAX_TOKENS:
        raise ValueError(f"x must be [tokens, hidden] with 1 to {MAX_TOKENS} tokens, got "
                         f"{tuple(x.shape)}")
    missing = [name for name in STACKED if name not in w]
    if missing:
        raise ValueError(f"stacked weights missing: {', '.join(missing)}")
    hidden = x.shape[1]
    layers, ff = w["up_w"].shape[:2]
    if w["qkv_w"].shape != (layers, 3 * hidden, hidden) or w["down_w"].shape != (layers, hidden,
                                                                                   ff):
        raise ValueError(f"weights {tuple(w['qkv_w'].shape)} / {tuple(w['down_w'].shape)} do "
                         f"not fit hidden {hidden}")
    if not fits(hidden, ff, heads):
        raise ValueError(f"hidden {hidden}, intermediate {ff}, {heads} heads do not fit the "
                         f"kernel's tiles (multiples of {TILES['BK']}, a power-of-two head "
                         "dim of at least 16)")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32:
        raise ValueError(f"cu_seqlens must be int32 [B+1] with B >= 1, got {cu_seqlens.dtype} "
                         f"{tuple(cu_seqlens.shape)}")


@functools.cache
def _device(device_index: int) -> tuple[bool, int]:
    """(tensor-descriptor loads: Hopper on, pointers before; programs: one an SM) on this GPU."""
    properties = torch.cuda.get_device_properties(device_index)
    return properties.major >= 9, properties.multi_processor_count


@torch.library.custom_op("hedgerow::resident_bert_layers", mutates_args=())
def _resident_bert_layers_op(x: torch.Tensor, cu_seqlens: torch.Tensor,
                             weights: list[torch.Tensor], heads: int, eps: float) -> torch.Tensor:
    from hedgerow.kernels.resident_layers_triton import bert_layers_triton
    w = dict(zip(STACKED, weights))
    tma, programs = _device(x.device.index or 0)
    tiles = tiles_for(x.shape[1], w["up_w"].shape[1], heads) | dict(TMA=tma)
    out, _ = bert_layers_triton(x, cu_seqlens, w, heads, eps, tiles, programs)
    return out


@_resident_bert_layers_op.register_fake
def _(x, cu_seqlens, weights, heads, eps):
    return torch.empty_like(x)


def resident_bert_layers(x: torch.Tensor, cu_seqlens: torch.Tensor, w: dict, heads: int,
                         eps: float) -> torch.Tensor:
    """Every layer of `w` (STACKED, [layers, ...]) on x; the kernel on CUDA, else the
    reference."""
    _check(x, cu_seqlens, w, heads)
    if not x.is_cuda:
        return reference_bert_layers(x, cu_seqlens, w, heads, eps)
    return _resident_bert_layers_op(x, cu_seqlens, [w[name] for name in STACKED], heads, eps)
