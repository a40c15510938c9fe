"""What the gateway knows about the served model before and after a server answers Info.

Owns the facts the gateway needs to validate and template requests: the served name, the task
(`embed`, or `rerank` for a cross-encoder), the architecture (a qwen3 cross-encoder reads
Qwen3-Reranker's prompt), the embedding width, the longest sequence, the vocabulary size and
the query/document templates. They are read from the model directory at start
(config.json, sentence_bert_config.json, config_sentence_transformers.json) and refined by the
first server's `Info` answer, which is authoritative for what the server will accept. Also owns
the rule for Matryoshka truncation: a model declares it was trained for it with
`matryoshka_dimensions` (a list of the widths it was trained at, as vLLM and Jina's models spell
it) or `is_matryoshka: true` (any width), in config.json or config_sentence_transformers.json;
`truncation_problem` says why a width may not be asked for. Knows nothing about HTTP or routing.
"""

import dataclasses
import logging
from pathlib import Path
from typing import Any

from hedgerow.errors import ModelLoadError
from hedgerow.model_files import model_task, read_object, read_sentence_transformers, readable
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.model")

INPUT_TYPES = ("query", "document")


@dataclasses.dataclass(frozen=True)
class ModelCard:
    name: str
    dimensions: int | None          # embedding width; None until known
    max_tokens: int                 # longest sequence, in tokens, special tokens included
    vocab_size: int | None          # token ids must be in [0, vocab_size)
    templates: dict[str, str]       # input_type -> prefix prepended before tokenizing
    max_request_tokens: int | None  # the server's per-request cap, from Info
    task: str = "embed"             # embed | rerank (hedgerow.model_files.TASKS)
    architecture: str | None = None  # config.json model_type (Info's architecture), e.g. qwen3
    # Matryoshka: None, not declared; () declared for any width; else the widths declared.
    matryoshka: tuple[int, ...] | None = None


MATRYOSHKA_FILES = ("config.json", "config_sentence_transformers.json")


def read_matryoshka(model_dir: Path, configs: dict[str, dict[str, Any]]
                    ) -> tuple[int, ...] | None:
    """The Matryoshka declaration of `configs` (file name -> its JSON object; see the module
    docstring). ModelLoadError for a `matryoshka_dimensions` that is no list of positive
    integers."""
    declared: tuple[int, ...] | None = None
    for name in MATRYOSHKA_FILES:
        config = configs.get(name, {})
        widths = config.get("matryoshka_dimensions")
        if widths is not None:
            if not (isinstance(widths, list) and widths and all(
                    isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths)):
                raise ModelLoadError(f"{model_dir / name}: matryoshka_dimensions is {widths!r}; "
                                     "it must be a list of positive integers (the widths the "
                                     "model was trained at)")
            return tuple(sorted(set(widths)))
        if config.get("is_matryoshka") is True:
            declared = ()
    return declared


def truncation_problem(card: ModelCard, dimensions: int, allow_any: bool) -> str | None:
    """Why `dimensions` (between 1 and the width) may not be asked of this model, or None."""
    if allow_any or dimensions == card.dimensions:
        return None
    if card.matryoshka is None:
        return (f"dimensions is {dimensions}, but {card.name} declares no Matryoshka training "
                "(no matryoshka_dimensions or is_matryoshka in its config.json or "
                "config_sentence_transformers.json), and its first dimensions alone are a poor "
                "embedding; leave dimensions out, or start the gateway with "
                "--allow-truncated-dimensions to truncate anyway")
    if card.matryoshka and dimensions not in card.matryoshka:
        widths = ", ".join(str(w) for w in card.matryoshka)
        return (f"dimensions is {dimensions}; {card.name} was trained for Matryoshka "
                f"truncation to {widths} (its matryoshka_dimensions) or its full width "
                f"{card.dimensions}; --allow-truncated-dimensions accepts any width")
    return None


def _positive(config: dict[str, Any], key: str) -> int | None:
    """config.json's `key` when it is a positive integer; None otherwise (the server's Info
    supplies the value then)."""
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def load_card(
    model_dir: Path,
    *,
    name: str,
    query_template: str | None,
    document_template: str | None,
) -> ModelCard:
    """Read the model directory's facts; configured templates win over the model's prompts."""
    with readable(model_dir):
        if not (model_dir / "tokenizer.json").is_file():
            raise ModelLoadError(f"{model_dir}: no tokenizer.json, which the gateway needs")
        configs = {name: read_object(model_dir / name) for name in MATRYOSHKA_FILES
                   if (model_dir / name).is_file()}
        config = configs.get("config.json", {})
        st = read_sentence_transformers(model_dir)
    max_tokens = st.max_seq_length or _positive(config, "max_position_embeddings") or 512
    if config.get("model_type") in ("roberta", "xlm-roberta") and st.max_seq_length is None:
        max_tokens -= 2  # RoBERTa positions start after the padding index
    templates = dict(st.templates)
    if query_template is not None:
        templates["query"] = query_template
    if document_template is not None:
        templates["document"] = document_template
    return ModelCard(
        name=name,
        dimensions=_positive(config, "hidden_size"),
        max_tokens=max_tokens,
        vocab_size=_positive(config, "vocab_size"),
        templates=templates,
        max_request_tokens=None,
        task=model_task(config, model_dir / "config.json"),
        architecture=config.get("model_type") if isinstance(config.get("model_type"), str)
        else None,
        matryoshka=read_matryoshka(model_dir, configs),
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
        task=info.task or card.task,
        architecture=info.architecture or card.architecture,
    )
    if refined != card:
        log.info("%s", fields(event="model.info", model=info.model, task=refined.task,
                              dimensions=refined.dimensions,
                              max_tokens=refined.max_tokens, vocab_size=refined.vocab_size,
                              templates=",".join(sorted(templates)) or "none"))
    return refined
