"""Triton kernels with their plain-torch references. Imports nothing of Hedgerow.

- `topk`: the public `topk(scores, k, valid_lengths=None, forced=None)` and the
  `hedgerow::topk` custom op (kernel on CUDA, reference elsewhere).
- `topk_reference`: the one total order every top-k ranks in, as 64-bit keys; `merge_topk`.
- `topk_triton`: the Triton kernel, its launch configurations and launcher (imports triton).
- `swiglu`: the SwiGLU gate over interleaved gate/up columns, and its reference.
- `head_norm_rope` (+ `_triton`): Qwen3's query/key RMSNorm and RoPE in one pass, the
  `hedgerow::head_norm_rope` custom op and its reference.
- `ragged_attention` (+ `_triton`): ragged attention for short sequences, and the float64
  `reference_attention` every attention backend is tested against.

See docs/kernels.md.
"""
