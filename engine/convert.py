"""From Hugging Face `config.json` and checkpoint tensor names to our model configs and
parameter names, fusing query/key/value (and Qwen3's gate/up) into one matrix each.

This module owns the per-architecture knowledge of the checkpoint layout. It knows nothing
about files (see checkpoint.py) or the sentence-transformers side of a directory (loader.py).
"""

from typing import Any

import torch

from hedgerow.engine.checkpoint import Checkpoint
from hedgerow.engine.models.bert import BERT_ACTIVATIONS, BertConfig
from hedgerow.engine.models.qwen3 import Qwen3Config
from hedgerow.errors import ModelLoadError

BERT_FAMILY = ("bert", "roberta", "xlm-roberta", "distilbert")  # DistilBERT: BERT's layers
SUPPORTED = BERT_FAMILY + ("qwen3",)


def _int(config: dict[str, Any], key: str, default: Any = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ModelLoadError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def _bool(config: dict[str, Any], key: str) -> bool:
    value = config[key]
    if not isinstance(value, bool):
        raise ModelLoadError(f"config.json: {key} must be true or false, got {value!r}")
    return value


def _float(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ModelLoadError(f"config.json: {key} must be a number, got {value!r}")
    return float(value)


def bert_config(config: dict[str, Any], task: str = "embed") -> BertConfig:
    """A cross-encoder (`task` "rerank") reads every token type of its table; an embedding
    model segment 0 only."""
    model_type = config["model_type"]
    if model_type == "distilbert":
        return _distilbert_config(config)
    kind = config.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ModelLoadError(
            f"config.json: position_embedding_type {kind!r} is not supported (only 'absolute')")
    act = config.get("hidden_act", "gelu")
    if act not in BERT_ACTIVATIONS:
        raise ModelLoadError(f"config.json: hidden_act {act!r} is not supported "
                             f"(supported: {', '.join(BERT_ACTIVATIONS)})")
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads")
    if hidden % heads:
        raise ModelLoadError(f"config.json: hidden_size {hidden} is not a multiple of "
                             f"num_attention_heads {heads}")
    offset = 0
    if model_type in ("roberta", "xlm-roberta"):
        pad = config.get("pad_token_id")
        if pad is None:
            pad = 1  # RoBERTa's padding_idx when the config does not say
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise ModelLoadError(f"config.json: pad_token_id must be an integer >= 0, got {pad!r}")
        offset = pad + 1
    positions = _int(config, "max_position_embeddings", 512)
    types = _int(config, "type_vocab_size", 2)
    if positions <= offset:
        raise ModelLoadError(
            f"config.json: max_position_embeddings {positions} leaves no position for tokens "
            f"({model_type} numbers positions from pad_token_id + 1 = {offset})")
    return BertConfig(
        vocab_size=_int(config, "vocab_size"),
        hidden_size=hidden,
        num_layers=_int(config, "num_hidden_layers"),
        num_heads=heads,
        intermediate_size=_int(config, "intermediate_size"),
        max_position_embeddings=positions,
        type_vocab_size=types,
        layer_norm_eps=_float(config, "layer_norm_eps", 1e-12),
        hidden_act=act,
        position_offset=offset,
        segments=types if task == "rerank" else 1,
    )


def _distilbert_config(config: dict[str, Any]) -> BertConfig:
    """DistilBERT is BERT's post-norm layers under other names, without token types (its
    embeddings add none: our one segment row stays zeros) and with LayerNorm eps 1e-12."""
    act = config.get("activation", "gelu")
    if act not in BERT_ACTIVATIONS:
        raise ModelLoadError(f"config.json: activation {act!r} is not supported "
                             f"(supported: {', '.join(BERT_ACTIVATIONS)})")
    hidden, heads = _int(config, "dim"), _int(config, "n_heads")
    if hidden % heads:
        raise ModelLoadError(f"config.json: dim {hidden} is not a multiple of n_heads {heads}")
    return BertConfig(vocab_size=_int(config, "vocab_size"), hidden_size=hidden,
                      num_layers=_int(config, "n_layers"), num_heads=heads,
                      intermediate_size=_int(config, "hidden_dim"),
                      max_position_embeddings=_int(config, "max_position_embeddings", 512),
                      type_vocab_size=1, hidden_act=act)


# id2label names that mean "relevant" in published cross-encoders (compared lowercased).
RELEVANT_LABELS = ("relevant", "positive", "yes", "true", "entailment")


def relevance_label(config: dict[str, Any]) -> tuple[int, int]:
    """(num_labels, the label whose score ranks) of a sequence-classification config.

    One label: that one. Several: the one label whose id2label name is in RELEVANT_LABELS, else
    label 1 of two (the usual "LABEL_1" = relevant); anything else is a ModelLoadError naming
    the labels, since no rule says which one ranks."""
    id2label = config.get("id2label") or {}
    if not isinstance(id2label, dict):
        raise ModelLoadError("config.json: id2label must be an object of label id -> name")
    # No id2label: transformers' default of two labels (it writes none for the default).
    count = len(id2label) or _int(config, "num_labels", 2)
    if count == 1:
        return 1, 0
    try:
        names = {int(key): str(name) for key, name in id2label.items()}
    except ValueError:
        raise ModelLoadError("config.json: id2label keys must be label numbers") from None
    relevant = [key for key, name in names.items() if name.lower() in RELEVANT_LABELS]
    if len(relevant) == 1:
        return count, relevant[0]
    if count == 2 and not relevant:
        return 2, 1
    shown = ", ".join(f"{key}={name}" for key, name in sorted(names.items()))
    raise ModelLoadError(
        f"config.json: a classifier with labels {shown} names no one relevance label (one of "
        f"{', '.join(RELEVANT_LABELS)}), so no score can rank; use a checkpoint with one "
        "label, or name the relevant one in id2label")


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise ModelLoadError("config.json: rope_parameters and rope_scaling must be objects")
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ModelLoadError(f"config.json: rope type {kind!r} is not supported (only 'default')")
    return _float(params if "rope_theta" in params else config, "rope_theta", 10000.0)


def qwen3_config(config: dict[str, Any], causal: bool | None) -> Qwen3Config:
    """`causal` None: from config.json (`is_causal`, or `use_bidirectional_attention`),
    else causal, the way the LLM was trained."""
    if causal is None:
        if "is_causal" in config:
            causal = _bool(config, "is_causal")
        elif "use_bidirectional_attention" in config:
            causal = not _bool(config, "use_bidirectional_attention")
        else:
            causal = True
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ModelLoadError(f"config.json: hidden_act {act!r} is not supported for qwen3 "
                             "(only 'silu')")
    layer_types = config.get("layer_types") or []
    if config.get("use_sliding_window") or any(t != "full_attention" for t in layer_types):
        raise ModelLoadError("config.json: sliding-window attention (use_sliding_window, "
                             "layer_types) is not supported: every layer here attends to the "
                             "whole sequence")
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise ModelLoadError(f"config.json: num_attention_heads {heads} is not a multiple of "
                             f"num_key_value_heads {kv_heads}")
    return Qwen3Config(
        vocab_size=_int(config, "vocab_size"),
        hidden_size=hidden,
        num_layers=_int(config, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_int(config, "head_dim", hidden // heads),
        intermediate_size=_int(config, "intermediate_size"),
        max_position_embeddings=_int(config, "max_position_embeddings", 32768),
        rms_norm_eps=_float(config, "rms_norm_eps", 1e-6),
        rope_theta=_rope_theta(config),
        attention_bias=bool(config.get("attention_bias", False)),
        causal=causal,
    )


class Weights(dict):
    """Our model's state dict, remembering which checkpoint tensor each entry came from."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: dict[str, str] = {}

    def put(self, ours: str, tensor: torch.Tensor, source: str) -> None:
        self[ours], self.sources[ours] = tensor, source


def bert_weights(ckpt: Checkpoint, config: BertConfig) -> Weights:
    """Our BertModel's state dict from a BERT/RoBERTa/XLM-R checkpoint (any head prefix)."""
    ckpt.use_prefix_of("embeddings.word_embeddings.weight")
    names = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
             "embeddings.LayerNorm.bias"]
    per_layer = ["attention.self.query", "attention.self.key", "attention.self.value",
                 "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                 "output.dense", "output.LayerNorm"]
    for i in range(config.num_layers):
        for part in per_layer:
            names += [f"encoder.layer.{i}.{part}.weight", f"encoder.layer.{i}.{part}.bias"]
    ckpt.require(names)
    g, out = ckpt.get, Weights()
    out.put("word_embeddings.weight", g("embeddings.word_embeddings.weight"),
            "embeddings.word_embeddings.weight")
    out.put("position_embeddings.weight", g("embeddings.position_embeddings.weight"),
            "embeddings.position_embeddings.weight")
    if config.segments > 1:
        out.put("token_type_embeddings.weight", g("embeddings.token_type_embeddings.weight"),
                "embeddings.token_type_embeddings.weight")
    else:
        out.put("token_type_embedding", g("embeddings.token_type_embeddings.weight")[0].clone(),
                "embeddings.token_type_embeddings.weight[0]")
    out.put("embed_norm.weight", g("embeddings.LayerNorm.weight"), "embeddings.LayerNorm.weight")
    out.put("embed_norm.bias", g("embeddings.LayerNorm.bias"), "embeddings.LayerNorm.bias")
    renames = {"attn_out": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
               "up.0": "intermediate.dense", "down": "output.dense", "mlp_norm": "output.LayerNorm"}
    for i in range(config.num_layers):
        src, dst = f"encoder.layer.{i}.", f"layers.{i}."
        for kind in ("weight", "bias"):
            fused = f"{src}attention.self.query/key/value.{kind}"
            out.put(dst + "qkv." + kind, _fuse(
                [g(f"{src}attention.self.{p}.{kind}") for p in ("query", "key", "value")],
                fused), fused)
            for ours, theirs in renames.items():
                out.put(f"{dst}{ours}.{kind}", g(f"{src}{theirs}.{kind}"), f"{src}{theirs}.{kind}")
    return out


def distilbert_weights(ckpt: Checkpoint, config: BertConfig) -> Weights:
    """Our BertModel's state dict from a DistilBERT checkpoint (any head prefix)."""
    ckpt.use_prefix_of("embeddings.word_embeddings.weight")
    embeddings = {"word_embeddings.weight": "embeddings.word_embeddings.weight",
                  "position_embeddings.weight": "embeddings.position_embeddings.weight",
                  "embed_norm.weight": "embeddings.LayerNorm.weight",
                  "embed_norm.bias": "embeddings.LayerNorm.bias"}
    renames = {"attn_out": "attention.out_lin", "attn_norm": "sa_layer_norm",
               "up.0": "ffn.lin1", "down": "ffn.lin2", "mlp_norm": "output_layer_norm"}
    qkv = ("attention.q_lin", "attention.k_lin", "attention.v_lin")
    names = list(embeddings.values())
    for i in range(config.num_layers):
        names += [f"transformer.layer.{i}.{part}.{kind}" for part in (*qkv, *renames.values())
                  for kind in ("weight", "bias")]
    ckpt.require(names)
    g, out = ckpt.get, Weights()
    for ours, theirs in embeddings.items():
        out.put(ours, g(theirs), theirs)
    out.put("token_type_embedding", torch.zeros(config.hidden_size, dtype=ckpt.dtype,
                                                device=ckpt.device), "(no token types)")
    for i in range(config.num_layers):
        src, dst = f"transformer.layer.{i}.", f"layers.{i}."
        for kind in ("weight", "bias"):
            fused = f"{src}attention.q_lin/k_lin/v_lin.{kind}"
            out.put(f"{dst}qkv.{kind}", _fuse([g(f"{src}{p}.{kind}") for p in qkv], fused),
                    fused)
            for ours, theirs in renames.items():
                out.put(f"{dst}{ours}.{kind}", g(f"{src}{theirs}.{kind}"), f"{src}{theirs}.{kind}")
    return out


# The sequence-classification head's tensors: (our name, BERT's, RoBERTa/XLM-R's), the latter
# two without the encoder's prefix (BERT's pooler lives under it).
_HEAD_TENSORS = (("dense", "bert.pooler.dense", "classifier.dense"),
                 ("out", "classifier", "classifier.out_proj"))


def score_head_weights(ckpt: Checkpoint, model_type: str) -> Weights:
    """Our ScoreHead's state dict from a *ForSequenceClassification checkpoint."""
    column = 1 if model_type == "bert" else 2
    names = [f"{row[column]}.{kind}" for row in _HEAD_TENSORS for kind in ("weight", "bias")]
    ckpt.require(names, prefixed=False)
    out = Weights()
    for row in _HEAD_TENSORS:
        for kind in ("weight", "bias"):
            theirs = f"{row[column]}.{kind}"
            out.put(f"{row[0]}.{kind}", ckpt.get(theirs, prefixed=False), theirs)
    return out


# A masked-LM head's tensors: (our name in MaskedLM, BertForMaskedLM's, DistilBertForMaskedLM's),
# weights and biases; then the decoder's (its bias's names, in the order they are looked for).
_MLM_TENSORS = (("transform.0", "cls.predictions.transform.dense", "vocab_transform"),
                ("transform_norm", "cls.predictions.transform.LayerNorm", "vocab_layer_norm"))
_MLM_DECODER = {"bert": ("cls.predictions.decoder", ("cls.predictions.decoder.bias",
                                                      "cls.predictions.bias")),
                "distilbert": ("vocab_projector", ("vocab_projector.bias",))}


def mlm_head_weights(ckpt: Checkpoint, config: dict[str, Any]) -> tuple[Weights, bool]:
    """Our MaskedLM head's state dict (without the encoder) from a Bert- or
    DistilBertForMaskedLM checkpoint,
    and whether the decoder is tied to the word embeddings (config.json `tie_word_embeddings`,
    true unless it says otherwise; then the checkpoint's decoder weight, if any, is not read,
    as transformers ties it over whatever the file holds)."""
    tied = config.get("tie_word_embeddings", True)
    if not isinstance(tied, bool):
        raise ModelLoadError(f"config.json: tie_word_embeddings must be true or false, "
                             f"got {tied!r}")
    # BERT's decoder adds `cls.predictions.decoder.bias`; a tied checkpoint holds it as
    # `cls.predictions.bias` only (transformers ties the two; an untied one may hold both, and
    # then the decoder's is the one its forward adds).
    column = 2 if config["model_type"] == "distilbert" else 1
    decoder, biases = _MLM_DECODER[config["model_type"]]
    bias = next((b for b in biases if ckpt.has(b, prefixed=False)), biases[-1])
    names = [f"{row[column]}.{kind}" for row in _MLM_TENSORS for kind in ("weight", "bias")]
    names += [bias] + ([] if tied else [f"{decoder}.weight"])
    ckpt.require(names, prefixed=False)
    out = Weights()
    for row in _MLM_TENSORS:
        for kind in ("weight", "bias"):
            theirs = f"{row[column]}.{kind}"
            out.put(f"{row[0]}.{kind}", ckpt.get(theirs, prefixed=False), theirs)
    out.put("decoder.bias", ckpt.get(bias, prefixed=False), bias)
    if not tied:
        out.put("decoder.weight", ckpt.get(f"{decoder}.weight", prefixed=False),
                f"{decoder}.weight")
    return out, tied


def qwen3_weights(ckpt: Checkpoint, config: Qwen3Config) -> Weights:
    """Our Qwen3Model's state dict from a Qwen3 checkpoint (with or without "model.")."""
    ckpt.use_prefix_of("embed_tokens.weight")
    projections = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
    names = ["embed_tokens.weight", "norm.weight"]
    for i in range(config.num_layers):
        p = f"layers.{i}."
        names += [p + n + ".weight" for n in projections + [
            "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "input_layernorm",
            "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]]
        if config.attention_bias:
            names += [p + n + ".bias" for n in projections]
    ckpt.require(names)
    g, out = ckpt.get, Weights()
    out.put("embed_tokens.weight", g("embed_tokens.weight"), "embed_tokens.weight")
    out.put("norm.weight", g("norm.weight"), "norm.weight")
    renames = {"o_proj.weight": "self_attn.o_proj.weight",
               "q_norm.weight": "self_attn.q_norm.weight",
               "k_norm.weight": "self_attn.k_norm.weight",
               "input_norm.weight": "input_layernorm.weight",
               "post_norm.weight": "post_attention_layernorm.weight",
               "down.weight": "mlp.down_proj.weight"}
    for i in range(config.num_layers):
        p = f"layers.{i}."
        fused = f"{p}self_attn.q/k/v_proj.weight"
        out.put(p + "qkv.weight", _fuse([g(f"{p}{n}.weight") for n in projections], fused), fused)
        if config.attention_bias:
            fused = f"{p}self_attn.q/k/v_proj.bias"
            out.put(p + "qkv.bias", _fuse([g(f"{p}{n}.bias") for n in projections], fused),
                    fused)
        fused = f"{p}mlp.gate_proj/up_proj.weight"
        out.put(p + "gate_up.0.weight",
                _fuse([g(f"{p}mlp.gate_proj.weight"), g(f"{p}mlp.up_proj.weight")], fused), fused)
        for ours, theirs in renames.items():
            out.put(p + ours, g(p + theirs), p + theirs)
    return out


def qwen3_answer_weights(ckpt: Checkpoint, config: dict[str, Any], token_ids: list[int]
                         ) -> Weights:
    """Our AnswerHead's state dict: rows `token_ids` ("no", "yes") of a Qwen3ForCausalLM's LM
    head, `lm_head.weight`, or of `embed_tokens.weight` when config.json ties the two
    (`tie_word_embeddings`, as Qwen3-Reranker-0.6B does; the file then holds no LM head)."""
    tied = config.get("tie_word_embeddings", False) is True
    if not tied and not ckpt.has("lm_head.weight", prefixed=False):
        raise ModelLoadError(f"missing tensor 'lm_head.weight' in {ckpt.directory}: a reranker "
                             "reads its answers' rows (config.json does not tie it to the "
                             "embeddings: tie_word_embeddings is not true)")
    name, prefixed = ("embed_tokens.weight", True) if tied else ("lm_head.weight", False)
    vocab = _int(config, "vocab_size")
    if any(i >= vocab for i in token_ids):
        raise ModelLoadError(f"config.json: vocab_size {vocab} has no row for the answer token "
                             f"ids {token_ids}")
    out = Weights()
    shown = f"{ckpt.prefix if prefixed else ''}{name}[{', '.join(map(str, token_ids))}]"
    out.put("answers", ckpt.rows(name, token_ids, prefixed), shown)
    return out


def qwen3_score_weights(ckpt: Checkpoint, config: dict[str, Any]) -> Weights:
    """Our AnswerHead's state dict from a Qwen3ForSequenceClassification (`score.weight`
    [num_labels, H], no bias), as AnswerHead's rows (negative, positive): one label's row
    after a zero row (its logit is the score), or of two the other label's row, then the
    relevant one's (`relevance_label`). Qwen3-Reranker converted this way (vLLM's and
    sentence-transformers' "seq-cls" form) has the one row lm_head[yes] - lm_head[no]."""
    labels, label = relevance_label(config)
    if labels > 2:
        raise ModelLoadError(f"config.json: a Qwen3 classifier of {labels} labels is not "
                             "served as a reranker (one relevance logit, or two labels)")
    ckpt.require(["score.weight"], prefixed=False)
    score = ckpt.get("score.weight", prefixed=False)
    if score.shape[0] != labels:
        raise ModelLoadError(f"weights in {ckpt.directory} do not fit config.json: score.weight "
                             f"has {score.shape[0]} rows for {labels} labels")
    negative = torch.zeros_like(score[0]) if labels == 1 else score[1 - label]
    out = Weights()
    out.put("answers", torch.stack([negative, score[label]]), "score.weight")
    return out


def _fuse(tensors: list[torch.Tensor], name: str) -> torch.Tensor:
    """Concatenate projections along the output axis; ModelLoadError when their inputs differ."""
    try:
        return torch.cat(tensors)
    except RuntimeError:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise ModelLoadError(f"cannot fuse {name}: the projections have shapes {shapes}, which "
                             "do not fit config.json") from None
