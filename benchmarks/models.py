"""Random-weight Hugging Face model directories of real shapes, made locally (no download).

    python -P benchmarks/models.py OUT_DIR [--device cuda] [--only bge-m3]

`write_model(name, directory)` builds the model with `transformers` from a config of the named
shape, initialises it randomly (on `device`, which is fast on a GPU), casts it to bf16 and saves
it with `save_pretrained` (safetensors), plus the sentence-transformers files that set pooling
and the longest sequence. Timing does not depend on weight values, so these stand in for the
real checkpoints in benchmarks. Shapes:

- `bge-m3`: XLM-RoBERTa large, 24 layers, width 1024, 16 heads of 64 (MHA), FFN 4096,
  vocab 250002, 8194 positions, CLS pooling.
- `qwen3-0.6b`: Qwen3-0.6B, 28 layers, width 1024, 16 query and 8 key/value heads of 128
  (GQA), FFN 3072, vocab 151669, causal, last-token pooling.
- `bge-reranker-v2-m3`: the cross-encoder on BGE-M3's encoder (XLM-RoBERTa large, as above)
  with a one-logit classification head (`XLMRobertaForSequenceClassification`), task rerank.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

SHAPES = ("bge-m3", "qwen3-0.6b", "bge-reranker-v2-m3")
RERANKERS = ("bge-reranker-v2-m3",)


def config_for(name: str, layers: int | None = None):
    """The transformers config of shape `name` (`layers` overrides the depth, for tests)."""
    import transformers

    if name in ("bge-m3", "bge-reranker-v2-m3"):
        return transformers.XLMRobertaConfig(
            vocab_size=250002, hidden_size=1024, num_hidden_layers=layers or 24,
            num_attention_heads=16, intermediate_size=4096, hidden_act="gelu",
            max_position_embeddings=8194, type_vocab_size=1, layer_norm_eps=1e-5,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, num_labels=1)
    if name == "qwen3-0.6b":
        return transformers.Qwen3Config(
            vocab_size=151669, hidden_size=1024, num_hidden_layers=layers or 28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128,
            intermediate_size=3072, max_position_embeddings=32768, rms_norm_eps=1e-6,
            rope_theta=1_000_000.0, attention_bias=False, tie_word_embeddings=True)
    raise ValueError(f"unknown shape {name!r} (known: {', '.join(SHAPES)})")


def _sentence_transformers_files(directory: Path, pooling: str, max_seq_length: int) -> None:
    modes = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
             "last": "pooling_mode_lasttoken"}
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 1024, modes[pooling]: True}))
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]))
    (directory / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": max_seq_length}))


def write_model(name: str, directory: Path, device: str = "cuda", layers: int | None = None,
                seed: int = 0) -> Path:
    """Write a random-weight bf16 model of shape `name` into `directory`; return it."""
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    config = config_for(name, layers)
    torch.manual_seed(seed)
    with torch.device(device):
        if name == "bge-m3":
            model = transformers.XLMRobertaModel(config, add_pooling_layer=False)
        elif name == "bge-reranker-v2-m3":
            model = transformers.XLMRobertaForSequenceClassification(config)
        else:
            model = transformers.Qwen3Model(config)
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(directory))
    if name == "bge-m3":
        _sentence_transformers_files(directory, "cls", 8192)
    elif name == "qwen3-0.6b":
        _sentence_transformers_files(directory, "last", 32768)
    del model
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write one directory per shape into")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=SHAPES, action="append")
    args = parser.parse_args(argv)
    for name in args.only or SHAPES:
        path = write_model(name, args.out / name, device=args.device)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
