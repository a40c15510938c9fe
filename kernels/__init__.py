"""Triton kernels with their plain-torch references. Imports nothing of Hedgerow.

- `topk`: the public `topk(scores, k, valid_lengths=None, forced=None)` and the
  `hedgerow::topk` custom op (kernel on CUDA, reference elsewhere).
- `topk_reference`: the one total order every top-k ranks in, as 64-bit keys; `merge_topk`.
- `topk_triton`: the Triton kernel, its launch configurations and launcher (imports triton).

See docs/kernels.md.
"""
