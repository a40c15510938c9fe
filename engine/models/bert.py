"""BERT-family encoders (BERT, RoBERTa, XLM-RoBERTa) on the ragged token axis. Math only.

No loading, no I/O, no padding, no attention mask: sequences sit end to end on one token axis
and the attention backend confines each token to its own sequence. Query, key and value are
one fused projection (`qkv`, [3H, H]); the loader fuses the checkpoint's three matrices.

RoBERTa and XLM-RoBERTa number positions from `padding_idx + 1` (`position_offset`) and, as
`transformers` does, skip tokens whose id is the padding id: those sit at `padding_idx` and do
not advance the count. Computed on the device from the 0-based per-sequence positions the caller
passes in, so it runs inside a CUDA graph.

A cross-encoder (`segments` > 1) reads token type ids (the query's segment 0, the document's
segment 1) folded into the ids: a token of segment s arrives as `id + s * vocab_size`, so the
ragged batch stays one int32 axis through the scheduler and the graphs. An embedding model
reads segment 0 only. `ScoreHead` turns a cross-encoder's pooled [CLS] rows into one relevance
score each; `LexicalWeights` gives each token BGE-M3's lexical weight; `MaskedLM` gives each
token BERT's masked-LM logits over the vocabulary (SPLADE pools them).
"""

from dataclasses import dataclass

import torch
from torch import nn

from hedgerow.engine.attention import Attention

_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
    "gelu_fast": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
}
BERT_ACTIVATIONS = tuple(_ACTIVATIONS)


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    position_offset: int = 0  # RoBERTa/XLM-R: padding_idx + 1 (padding_idx is the pad token id)
    segments: int = 1  # token types read (folded into the ids); 1: every token is segment 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def usable_positions(self) -> int:
        """Longest sequence the position table can number."""
        return self.max_position_embeddings - self.position_offset


def padding_aware_positions(input_ids: torch.Tensor, position_ids: torch.Tensor,
                            padding_idx: int) -> torch.Tensor:
    """RoBERTa's position ids on the ragged axis: the k-th non-padding token of a sequence is
    at `padding_idx + k`, a padding-id token at `padding_idx` (transformers'
    create_position_ids_from_input_ids). input_ids, position_ids [T] -> int64 [T]."""
    counted = (input_ids != padding_idx).to(torch.int64)
    running = torch.cumsum(counted, 0)  # non-padding tokens so far, over the whole batch
    starts = torch.arange(input_ids.shape[0], device=input_ids.device) - position_ids
    before = running[starts] - counted[starts]  # ...before each token's sequence began
    return (running - before) * counted + padding_idx


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.qkv = nn.Linear(h, 3 * h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        # Linear then activation as one Sequential: a backend may fuse the pair (see cpu_linear).
        self.up = nn.Sequential(nn.Linear(h, i), _ACTIVATIONS[config.hidden_act]())
        self.down = nn.Linear(i, h)
        self.mlp_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                attention: Attention) -> torch.Tensor:
        tokens = x.shape[0]
        qkv = self.qkv(x).view(tokens, 3, self.num_heads, self.head_dim)
        a = attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, max_seqlen, False)
        x = self.attn_norm(x + self.attn_out(a.reshape(tokens, -1)))
        return self.mlp_norm(x + self.down(self.up(x)))


class BertModel(nn.Module):
    """forward(input_ids [T], position_ids [T], cu_seqlens int32 [B+1], max_seqlen,
    attention) -> hidden [T, H] (last layer, before pooling)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        # N(0, 1) as nn.Embedding's own init, but from a factory: on the loader's meta device
        # nn.init.normal_ imports torch._dynamo, about 0.9 s of every start.
        self.word_embeddings = nn.Embedding.from_pretrained(torch.randn(config.vocab_size, h))
        self.position_embeddings = nn.Embedding.from_pretrained(
            torch.randn(config.max_position_embeddings, h))
        if config.segments > 1:  # a cross-encoder: the type table, read by folded ids
            self.token_type_embeddings = nn.Embedding.from_pretrained(
                torch.zeros(config.segments, h))
        else:  # every token is segment 0 (embeddings take one segment): one row of the table
            self.token_type_embedding = nn.Parameter(torch.zeros(h))
        self.embed_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))
        # All the layers as one kernel launch for small batches, when the GPU engine gives one
        # (engine/resident.py): forward(x, cu_seqlens), taking up to its `max_tokens` tokens.
        self.resident_layers: nn.Module | None = None

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int, attention: Attention) -> torch.Tensor:
        segment = None
        if self.config.segments > 1:
            segment = torch.div(input_ids, self.config.vocab_size, rounding_mode="floor")
            input_ids = input_ids - segment * self.config.vocab_size
        positions = position_ids
        if self.config.position_offset:
            positions = padding_aware_positions(input_ids, position_ids,
                                                self.config.position_offset - 1)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        if segment is None:
            x = self.embed_norm(x + self.token_type_embedding)
        else:
            x = self.embed_norm(x + self.token_type_embeddings(segment))
        if self.resident_layers is not None and x.shape[0] <= self.resident_layers.max_tokens:
            return self.resident_layers(x, cu_seqlens)
        for layer in self.layers:
            x = layer(x, cu_seqlens, max_seqlen, attention)
        return x


class ScoreHead(nn.Module):
    """A sequence-classification head as one relevance score per sequence.

    forward(pooled float32 [B, H], the [CLS] rows) -> float32 [B, 1]. The logits are
    `out(tanh(dense(pooled)))` (BERT's pooler and classifier; RoBERTa's classifier dense and
    out_proj: the same math). With one label the score is its logit; with several, the log-odds
    of `label` against the rest, `logit[label] - logsumexp(others)`, whose sigmoid is the
    softmax probability of `label`. The head computes in its weights' dtype (the loader keeps
    it in float64): a float32 matrix product's rounding depends on the batch's row count and a
    row's place in it, which would score a duplicate pair differently in one batch, while in
    float64 those differences vanish in the rounding to float32.
    """

    def __init__(self, hidden_size: int, num_labels: int, label: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, num_labels)
        self.label = label

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        x = pooled.to(self.dense.weight.dtype)
        logits = self.out(torch.tanh(self.dense(x)))
        k = self.label
        score = logits[:, k:k + 1]
        if logits.shape[1] > 1:
            others = torch.cat((logits[:, :k], logits[:, k + 1:]), dim=1)
            score = score - torch.logsumexp(others, dim=1, keepdim=True)
        return score.float()


class LexicalWeights(nn.Module):
    """BGE-M3's sparse head on an encoder: each token's weight `relu(linear(hidden))`.

    forward(input_ids [T], position_ids [T], cu_seqlens, max_seqlen, attention) -> [T, 1] in
    the model's dtype (pooling "tokens" lays them out per sequence; the max per token id is
    taken by whoever knows the ids)."""

    def __init__(self, encoder: BertModel) -> None:
        super().__init__()
        self.encoder = encoder
        self.config = encoder.config
        self.sparse_linear = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int, attention: Attention) -> torch.Tensor:
        hidden = self.encoder(input_ids, position_ids, cu_seqlens, max_seqlen, attention)
        return torch.relu(self.sparse_linear(hidden))


class MaskedLM(nn.Module):
    """BERT's masked-LM head on an encoder: each token's logits over the vocabulary.

    forward(input_ids [T], position_ids [T], cu_seqlens, max_seqlen, attention) -> logits
    [T, vocab_size] in the model's dtype: `decoder(norm(act(dense(hidden))))`, the decoder
    with its bias (transformers' BertLMPredictionHead; a tied decoder's weight is the word
    embeddings'). Pooling "splade" max-pools them per sequence."""

    def __init__(self, encoder: BertModel) -> None:
        super().__init__()
        self.encoder = encoder
        self.config = config = encoder.config
        h = config.hidden_size
        # Linear then activation as one Sequential: a backend may fuse the pair (see cpu_linear).
        self.transform = nn.Sequential(nn.Linear(h, h), _ACTIVATIONS[config.hidden_act]())
        self.transform_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(h, config.vocab_size)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int, attention: Attention) -> torch.Tensor:
        hidden = self.encoder(input_ids, position_ids, cu_seqlens, max_seqlen, attention)
        return self.decoder(self.transform_norm(self.transform(hidden)))
