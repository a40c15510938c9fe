"""What the gateway knows about the served model before and after a server answers Info.

Owns the facts the gateway needs to validate and template requests: the served name, the
embedding width, the longest sequence, the vocabulary size and the query/document templates.
They are read from the model directory at start (config.json, sentence_bert_config.json,
config_sentence_transformers.json) and refined by the first server's `Info` answer, which is
authoritative for what the server will accept. Knows nothing about HTTP or routing.
"""

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from hedgerow.errors import ModelLoadError
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.model")

INPUT_TYPES = ("query", "document")
# config_sentence_transformers.json prompt names that mean "document" in published models.
_DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


@dataclasses.dataclass(frozen=True)
class ModelCard:
    name: str
    dimensions: int | None          # embedding width; None until known
    max_tokens: int                 # longest sequence, in tokens, special tokens included
    vocab_size: int | None          # token ids must be in [0, vocab_size)
    templates: dict[str, str]       # input_type -> prefix prepended before tokenizing
    max_request_tokens: int | None  # the server's per-request cap, from Info


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: cannot read it as JSON ({error})") from None
    return value if isinstance(value, dict) else {}


def templates_from_prompts(prompts: dict[str, Any]) -> dict[str, str]:
    """Map a sentence-transformers `prompts` dict onto the gateway's input types."""
    out: dict[str, str] = {}
    if isinstance(prompts.get("query"), str):
        out["query"] = prompts["query"]
    for name in _DOCUMENT_PROMPT_NAMES:
        if isinstance(prompts.get(name), str):
            out["document"] = prompts[name]
            break
    return out


def load_card(
    model_dir: Path,
    *,
    name: str,
    query_template: str | None,
    document_template: str | None,
) -> ModelCard:
    """Read the model directory's facts; configured templates win over the model's prompts."""
    if not (model_dir / "tokenizer.json").is_file():
        raise ModelLoadError(f"{model_dir}: no tokenizer.json, which the gateway needs")
    config = _read_json(model_dir / "config.json")
    sbert = _read_json(model_dir / "sentence_bert_config.json")
    st_config = _read_json(model_dir / "config_sentence_transformers.json")
    max_tokens = sbert.get("max_seq_length") or config.get("max_position_embeddings") or 512
    if config.get("model_type") in ("roberta", "xlm-roberta") and "max_seq_length" not in sbert:
        max_tokens -= 2  # RoBERTa positions start after the padding index
    templates = templates_from_prompts(st_config.get("prompts") or {})
    if query_template is not None:
        templates["query"] = query_template
    if document_template is not None:
        templates["document"] = document_template
    return ModelCard(
        name=name,
        dimensions=config.get("hidden_size"),
        max_tokens=int(max_tokens),
        vocab_size=config.get("vocab_size"),
        templates=templates,
        max_request_tokens=None,
    )


def refine_with_info(card: ModelCard, info: Any, configured: dict[str, str]) -> ModelCard:
    """Adopt a server's Info (an embed_pb2.InfoResponse): width and limits are the server's.

    `configured` holds templates set by flag; they still win over the server's templates, which
    in turn win over the model directory's prompts.
    """
    templates = dict(card.templates)
    templates.update({k: v for k, v in info.templates.items() if k in INPUT_TYPES})
    templates.update(configured)
    refined = dataclasses.replace(
        card,
        dimensions=info.dimensions or card.dimensions,
        max_tokens=info.max_tokens or card.max_tokens,
        vocab_size=info.vocab_size or card.vocab_size,
        templates=templates,
        max_request_tokens=info.max_request_tokens or None,
    )
    if refined != card:
        log.info("%s", fields(event="model.info", model=info.model, dimensions=refined.dimensions,
                              max_tokens=refined.max_tokens, vocab_size=refined.vocab_size,
                              templates=",".join(sorted(templates)) or "none"))
    return refined
