"""Qwen3 decoder stacks used as embedding models and rerankers, on the ragged token axis. Math
only.

Pre-norm blocks with RMSNorm, per-head RMSNorm on queries and keys, rotary position
embeddings, grouped-query attention and a SwiGLU MLP. Query, key and value are one fused
projection (`qkv`, [(Hq + 2 Hkv) D, H]) and gate/up one more ([gate; up] rows), which sits with
its SwiGLU in one Sequential (`gate_up`) so a backend may fuse the pair (cuda_linear.py); the
loader fuses the checkpoint's matrices. `causal` picks causal (the LLM's own mask) or bidirectional
attention (embedding fine-tunes such as pplx-embed). `AnswerHead` turns the last token's
hidden state into Qwen3-Reranker's relevance score. No KV cache, no padding, no I/O.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hedgerow.engine.attention import Attention
from hedgerow.kernels.head_norm_rope import head_norm_rope


@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False
    causal: bool = True

    @property
    def usable_positions(self) -> int:
        return self.max_position_embeddings


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class SwiGLU(nn.Module):
    """silu(gate) * up over a [T, 2I] product whose first I columns are the gate."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def rotary_table(head_dim: int, theta: float,
                 positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cos and sin of position p at frequency i, float32 [positions, head_dim / 2] each,
    on the CPU: the angle p * theta^(-2i / head_dim), as `transformers` computes it."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    angles = torch.arange(positions, dtype=torch.float32, device="cpu")[:, None] * inv_freq
    return angles.cos(), angles.sin()


class Qwen3Layer(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, d
        self.causal = config.causal
        self.input_norm = RMSNorm(h, config.rms_norm_eps)
        self.qkv = nn.Linear(h, (config.num_heads + 2 * config.num_kv_heads) * d,
                             bias=config.attention_bias)
        # Their weights and eps; head_norm_rope applies them (with RoPE) in forward.
        self.q_norm = RMSNorm(d, config.rms_norm_eps)
        self.k_norm = RMSNorm(d, config.rms_norm_eps)
        self.o_proj = nn.Linear(config.num_heads * d, h, bias=False)
        self.post_norm = RMSNorm(h, config.rms_norm_eps)
        self.gate_up = nn.Sequential(nn.Linear(h, 2 * config.intermediate_size, bias=False),
                                     SwiGLU())
        self.down = nn.Linear(config.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int, attention: Attention) -> torch.Tensor:
        tokens = x.shape[0]
        qkv = self.qkv(self.input_norm(x)).view(
            tokens, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        # One Triton kernel on CUDA (kernels/head_norm_rope.py), plain torch elsewhere.
        q, k = head_norm_rope(qkv, self.q_norm.weight, self.k_norm.weight, cos, sin,
                              self.num_heads, self.num_kv_heads, self.q_norm.eps)
        v = qkv[:, self.num_heads + self.num_kv_heads:]
        a = attention(q, k, v, cu_seqlens, max_seqlen, self.causal)
        x = x + self.o_proj(a.reshape(tokens, -1))
        return x + self.down(self.gate_up(self.post_norm(x)))


class Qwen3Model(nn.Module):
    """forward(input_ids [T], position_ids [T], cu_seqlens int32 [B+1], max_seqlen,
    attention) -> hidden [T, H] (after the final norm, before pooling)."""

    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.config = config
        # A factory, not nn.Embedding's init: see BertModel.
        self.embed_tokens = nn.Embedding.from_pretrained(
            torch.randn(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(Qwen3Layer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        # Not from the checkpoint, so computed on the CPU even when the model is built on the
        # meta device; it moves with the model (the loader's `to(device)`).
        cos, sin = rotary_table(config.head_dim, config.rope_theta,
                                config.max_position_embeddings)
        self.register_buffer("rotary_cos", cos, persistent=False)
        self.register_buffer("rotary_sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int, attention: Attention) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        # Read from the table: computing cos and sin per token here let the compiled forward
        # recompute them inside every layer's query/key kernel (4.1 of 17.1 ms of a 16 x 512
        # step of Qwen3-0.6B, measured on an H100; large angles make cos and sin slow).
        cos = self.rotary_cos[position_ids]     # float32 [T, D / 2]
        sin = self.rotary_sin[position_ids]
        for layer in self.layers:
            x = layer(x, cos, sin, cu_seqlens, max_seqlen, attention)
        return self.norm(x)


class AnswerHead(nn.Module):
    """Qwen3-Reranker's score: the log-odds of the answer "yes" against "no" at the last token.

    forward(pooled float32 [B, H], the last token's hidden state after the final norm) ->
    float32 [B, 1], `logit_yes - logit_no`, whose sigmoid is softmax([logit_no, logit_yes])[1],
    the reranker's relevance probability. `answers` [2, H] holds the LM head's rows of "no" and
    "yes" only: the rest of the vocabulary never matters to the score, so it is never computed.
    (A sequence-classification conversion's rows fit too: a zero row and its one label's.)
    Computes in its weights' dtype (the loader keeps float64, as for ScoreHead in bert.py: a
    pair's score then does not depend on its row in the batch).
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.answers = nn.Parameter(torch.empty(2, hidden_size))

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        logits = pooled.to(self.answers.dtype) @ self.answers.T
        return (logits[:, 1:2] - logits[:, 0:1]).float()
