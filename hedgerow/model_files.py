"""Reading a model directory's JSON files: the facts the engine and the gateway both need.

The sentence-transformers files of a Hugging Face directory, all optional: `modules.json` and
`1_Pooling/config.json` (pooling, and whether a Normalize module follows),
`sentence_bert_config.json` (`max_seq_length`) and `config_sentence_transformers.json`
(`prompts`, which become the query and document templates). One reader for the engine (which
serves with them) and the gateway (which templates and checks requests before a server
answers), so the two never disagree. Torch-free. Every failure is a ModelLoadError naming the
file.
"""

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from hedgerow.errors import ModelLoadError

# config_sentence_transformers.json prompt names that mean "document" in published models.
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_lasttoken": "last"}

# config.json `architectures` the engine serves, and the task each serves: `embed` (pooled
# vectors), `rerank` (a cross-encoder: one relevance score per query-document pair) or
# `sparse` (a Bert- or DistilBertForMaskedLM as SPLADE: its MLM head's logits max-pooled into
# a vocabulary-wide sparse vector). A head the engine would drop (another masked-LM, token
# classification, ...) is not here: such a checkpoint is refused, never served as something
# else. Qwen3ForCausalLM is how Qwen3 embedding models ship (the LM head is unused by them), and
# Qwen3-Reranker too: that one is a reranker only when the task is asked for
# (engine/loader.py). A config without `architectures` is its model_type's base model.
ARCHITECTURES = {
    "BertModel": "embed", "RobertaModel": "embed", "XLMRobertaModel": "embed",
    "Qwen3Model": "embed", "Qwen3ForCausalLM": "embed",
    "BertForSequenceClassification": "rerank", "RobertaForSequenceClassification": "rerank",
    "XLMRobertaForSequenceClassification": "rerank", "Qwen3ForSequenceClassification": "rerank",
    "BertForMaskedLM": "sparse", "DistilBertForMaskedLM": "sparse",
}
# BGE-M3's lexical weights (also `sparse`) are never read from config.json: a BGE-M3 checkpoint
# is an embedding model that also ships `sparse_linear.pt`, and serves them when asked.
TASKS = ("embed", "rerank", "sparse")
SPARSE_HEAD_FILE = "sparse_linear.pt"


@dataclass(frozen=True)
class SentenceTransformersSettings:
    """What a sentence-transformers directory says about serving; None where it is silent."""

    pooling: str | None = None
    normalize: bool | None = None
    max_seq_length: int | None = None
    templates: dict[str, str] = field(default_factory=dict)  # "query"/"document" -> prefix


@contextlib.contextmanager
def readable(directory: Path) -> Iterator[None]:
    """Turn a permission error anywhere inside into a ModelLoadError naming the path."""
    try:
        yield
    except PermissionError as error:
        raise ModelLoadError(f"cannot read {error.filename or directory}: permission denied"
                             ) from None


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise ModelLoadError(f"cannot read {path}: {error}") from None


def read_object(path: Path) -> dict[str, Any]:
    value = read_json(path)
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path} must hold a JSON object")
    return value


def model_task(config: dict[str, Any], path: Path) -> str:
    """The task (a key of TASKS) of the checkpoint whose config.json (at `path`) is `config`;
    ModelLoadError naming the architecture when the engine does not serve it."""
    names = config.get("architectures") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ModelLoadError(f"{path}: architectures must be a list of class names")
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise ModelLoadError(
            f"{path}: architecture {unknown[0]!r} is not served (its head would be dropped or "
            f"its layers are unknown here); served: {', '.join(ARCHITECTURES)}")
    tasks = sorted({ARCHITECTURES[n] for n in names}) or ["embed"]
    if len(tasks) > 1:
        raise ModelLoadError(f"{path}: architectures {', '.join(names)} name different tasks "
                             f"({', '.join(tasks)}); keep the one this checkpoint is")
    return tasks[0]


def templates_from_prompts(prompts: dict[str, Any]) -> dict[str, str]:
    """Map a sentence-transformers `prompts` dict onto the input types query and document."""
    out: dict[str, str] = {}
    if isinstance(prompts.get("query"), str):
        out["query"] = prompts["query"]
    for name in DOCUMENT_PROMPT_NAMES:
        if isinstance(prompts.get(name), str):
            out["document"] = prompts[name]
            break
    return out


def read_sentence_transformers(directory: Path) -> SentenceTransformersSettings:
    """Parse the sentence-transformers files of `directory` (all optional)."""
    pooling = normalize = max_seq_length = None
    templates: dict[str, str] = {}
    modules_path = directory / "modules.json"
    if modules_path.is_file():
        modules = read_json(modules_path)
        if not isinstance(modules, list):
            raise ModelLoadError(f"{modules_path}: expected a list of modules")
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        normalize = any(t.endswith(".Normalize") for t in types)
        for module in modules:
            if isinstance(module, dict) and str(module.get("type", "")).endswith(".Pooling"):
                pool_config = directory / str(module.get("path", "1_Pooling")) / "config.json"
                if pool_config.is_file():
                    pooling = _pooling_mode(read_object(pool_config), pool_config)
    elif (directory / "1_Pooling" / "config.json").is_file():
        pool_config = directory / "1_Pooling" / "config.json"
        pooling = _pooling_mode(read_object(pool_config), pool_config)
    bert_config = directory / "sentence_bert_config.json"
    if bert_config.is_file():
        value = read_object(bert_config).get("max_seq_length")
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ModelLoadError(f"{bert_config}: max_seq_length must be a positive integer")
            max_seq_length = value
    st_config = directory / "config_sentence_transformers.json"
    if st_config.is_file():
        prompts = read_object(st_config).get("prompts") or {}
        if not isinstance(prompts, dict):
            raise ModelLoadError(f"{st_config}: prompts must be an object")
        templates = templates_from_prompts(prompts)
    return SentenceTransformersSettings(pooling, normalize, max_seq_length, templates)


def _pooling_mode(config: dict[str, Any], path: Path) -> str:
    """The one pooling mode a sentence-transformers Pooling config turns on.

    Several modes at once would make sentence-transformers concatenate them into a wider
    vector, which we do not compute: that is refused rather than silently pooled one way.
    """
    modes = [k for k, v in config.items() if k.startswith("pooling_mode") and v]
    if len(modes) == 1 and modes[0] in POOLING_MODES:
        return POOLING_MODES[modes[0]]
    raise ModelLoadError(f"{path}: pooling {' + '.join(modes) or '(none)'} is not supported "
                         f"(supported: exactly one of cls, mean, last token)")


def read_splade_pooling(directory: Path) -> tuple[str, str]:
    """(pooling_strategy, activation_function) of the SpladePooling module a
    sentence-transformers SparseEncoder directory lists in modules.json; SpladePooling's
    defaults ("max", "relu") when there is none or its config leaves them out."""
    modules_path = directory / "modules.json"
    modules = read_json(modules_path) if modules_path.is_file() else []
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith(".SpladePooling"):
            path = directory / str(module.get("path", "")) / "config.json"
            config = read_object(path) if path.is_file() else {}
            return (str(config.get("pooling_strategy", "max")),
                    str(config.get("activation_function", "relu")))
    return "max", "relu"
