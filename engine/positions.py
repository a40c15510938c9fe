"""Per-token positions and sequence indices of a ragged batch, computed on the host.

The forward pass must never read a device value back to the host (a CUDA graph could not
capture it), so everything that depends on the *values* of `cu_seqlens` is computed here, on
the host, before launch, and handed to the model as tensors. This module knows nothing about
models or devices.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLayout:
    """Host tensors derived from `cu_seqlens` for one batch.

    position_ids: int64 [T], 0-based position of each token inside its own sequence.
    seq_index:    int64 [T], which sequence (0..B-1) each token belongs to.
    lengths:      int64 [B], tokens per sequence.
    """

    position_ids: torch.Tensor
    seq_index: torch.Tensor
    lengths: torch.Tensor


def token_layout(cu_seqlens: torch.Tensor) -> TokenLayout:
    """Positions and sequence indices for `cu_seqlens` int32 [B+1] (host tensor).

    Returns int64 tensors on the host: position_ids [T], seq_index [T], lengths [B].
    """
    cu = cu_seqlens.to(torch.int64)
    lengths = cu[1:] - cu[:-1]
    num_tokens = int(cu[-1])
    seq_index = torch.repeat_interleave(torch.arange(lengths.numel()), lengths,
                                        output_size=num_tokens)
    position_ids = torch.arange(num_tokens) - cu[:-1][seq_index]
    return TokenLayout(position_ids=position_ids, seq_index=seq_index, lengths=lengths)
