"""Load a Hugging Face model directory into one of our models, ready to run.

A directory holds `config.json`, `model.safetensors` (or shards with
`model.safetensors.index.json`) and, when it was saved by sentence-transformers, `modules.json`,
`1_Pooling/config.json` (pooling), `sentence_bert_config.json` (`max_seq_length`),
`config_sentence_transformers.json` (`prompts`, which become templates) and a Normalize module
(those read by hedgerow/model_files.py, shared with the gateway). This module turns that into a
model on the target device and dtype plus the serving defaults. Every failure is a ModelLoadError
that says what is wrong and where. It knows nothing about tokenizers (the tokenizer.json is the
caller's business, but for the two answer tokens a Qwen3-Reranker's score reads) or about
batching.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hedgerow.defaults import model_name
from hedgerow.engine import convert
from hedgerow.engine.checkpoint import Checkpoint
from hedgerow.engine.models.bert import (BertConfig, BertModel, LexicalWeights, MaskedLM,
                                         ScoreHead)
from hedgerow.engine.pooling import SPLADE, TOKENS
from hedgerow.engine.models.qwen3 import AnswerHead, Qwen3Config, Qwen3Model
from hedgerow.errors import ModelLoadError
from hedgerow.model_files import (
    SPARSE_HEAD_FILE, model_task, read_object, read_sentence_transformers, read_splade_pooling,
    readable,
)
from hedgerow.progress import bar
from hedgerow.reranker_prompt import ANSWER_TOKENS
from hedgerow.tokenizer_file import load_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: nn.Module  # BertModel, Qwen3Model, LexicalWeights or MaskedLM, eval, on `device`
    architecture: str  # model_type: bert | roberta | xlm-roberta | distilbert | qwen3
    task: str  # embed | rerank | sparse (hedgerow.model_files.TASKS)
    head: ScoreHead | AnswerHead | None  # a cross-encoder's score head (on the pooled rows)
    config: BertConfig | Qwen3Config
    name: str
    pooling: str
    normalize: bool
    max_tokens: int
    templates: dict[str, str]
    dtype: torch.dtype
    device: torch.device


def checked_device(name: str | torch.device) -> torch.device:
    """The device `name` names, with CUDA's index filled in; ModelLoadError when it names none,
    or CUDA that this machine does not have."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ModelLoadError(f"device {name!r} is not a device (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device {name!r} asked for, but CUDA is not available here")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu" or device.index is not None:  # cpu:N is no device safetensors knows
        raise ModelLoadError(f"device {name!r} is not supported (use cpu, cuda or cuda:N)")
    return device


def load_model(path: str | Path, device: str | torch.device = "cpu",
               dtype: str = "float32", causal: bool | None = None,
               task: str | None = None) -> LoadedModel:
    """Load the model directory `path` onto `device` in `dtype` (a key of `DTYPES`).

    `causal` applies to Qwen3 only: None reads config.json (`is_causal`,
    `use_bidirectional_attention`) and otherwise keeps the LLM's causal mask. `task` (embed,
    rerank or sparse) is what the caller expects: a checkpoint of another task is a
    ModelLoadError; None takes the checkpoint's (config.json `architectures`). A
    Qwen3ForCausalLM is an embedding model unless `task` is rerank: then it is Qwen3-Reranker,
    scored by its LM head's "yes" and "no" rows (their ids from the directory's tokenizer.json);
    its Qwen3ForSequenceClassification conversion is a reranker by its architecture. Task sparse is
    SPLADE for a masked-LM checkpoint, BGE-M3's lexical weights for an embedding checkpoint
    with `sparse_linear.pt` beside it.
    """
    directory = Path(path).expanduser()
    with readable(directory):
        return _load_model(directory, device, dtype, causal, task)


def _check_fit(model: nn.Module, weights: convert.Weights, directory: Path) -> None:
    """One line naming the first checkpoint tensor whose shape config.json does not imply
    (torch's own message lists every mismatch under our internal names)."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    wrong = [name for name, t in weights.items() if tuple(t.shape) != expected[name]]
    if wrong:
        first = wrong[0]
        more = f" ({len(wrong) - 1} more tensors differ)" if len(wrong) > 1 else ""
        raise ModelLoadError(
            f"weights in {directory} do not fit config.json: {weights.sources[first]} has shape "
            f"{tuple(weights[first].shape)}, config.json implies {expected[first]}{more}")


def _with_lexical_weights(encoder: BertModel, directory: Path, device: torch.device,
                          dtype: torch.dtype) -> LexicalWeights:
    """`encoder` with BGE-M3's sparse head from `sparse_linear.pt` (a torch state dict of
    `weight` [1, H] and `bias` [1], read with weights_only: tensors, no code)."""
    path = directory / SPARSE_HEAD_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as error:
        raise ModelLoadError(f"cannot read {path}: {error}") from None
    hidden = encoder.config.hidden_size
    if not isinstance(state, dict) or set(state) != {"weight", "bias"} or tuple(
            state["weight"].shape) != (1, hidden) or tuple(state["bias"].shape) != (1,):
        raise ModelLoadError(f"{path} must hold a linear layer of {hidden} -> 1 (weight "
                             f"[1, {hidden}] and bias [1]), as BGE-M3's does")
    with torch.device("meta"):
        model = LexicalWeights(encoder)
    model.sparse_linear.load_state_dict(
        {name: t.to(device=device, dtype=dtype) for name, t in state.items()}, assign=True)
    return model


def _answer_ids(directory: Path) -> list[int]:
    """The token ids of Qwen3-Reranker's answers ("no", "yes": ANSWER_TOKENS) in the
    directory's tokenizer.json, each one token as the reference looks it up."""
    tokenizer = load_tokenizer(directory)
    ids = [tokenizer.token_to_id(token) for token in ANSWER_TOKENS]
    absent = [token for token, i in zip(ANSWER_TOKENS, ids) if i is None]
    if absent:
        raise ModelLoadError(f"{directory / 'tokenizer.json'} has no token "
                             f"{' or '.join(repr(t) for t in absent)}: a Qwen3-Reranker scores "
                             "the answers \"yes\" and \"no\", one token each")
    return ids
def _with_mlm_head(encoder: BertModel, weights: convert.Weights, tied: bool,
                   directory: Path) -> MaskedLM:
    """`encoder` with a masked-LM checkpoint's head (`convert.mlm_head_weights`); a tied
    decoder shares the word embeddings' tensor."""
    with torch.device("meta"):
        model = MaskedLM(encoder)
    if tied:
        weights.put("decoder.weight", encoder.word_embeddings.weight,
                    "embeddings.word_embeddings.weight (tied)")
    _check_fit(model, weights, directory)
    state = {f"encoder.{name}": t for name, t in encoder.state_dict().items()}
    model.load_state_dict(state | weights, strict=True, assign=True)
    return model


def _check_splade_pooling(directory: Path) -> None:
    """A SparseEncoder directory's SpladePooling must be what the engine computes."""
    strategy, activation = read_splade_pooling(directory)
    if (strategy, activation) != ("max", "relu"):
        raise ModelLoadError(
            f"{directory}: SpladePooling with pooling_strategy {strategy!r} and "
            f"activation_function {activation!r} is not served (served: max over the tokens "
            "of log(1 + relu(logit)), SPLADE v2's)")


def _load_model(directory: Path, device: str | torch.device, dtype: str,
                causal: bool | None, expected_task: str | None) -> LoadedModel:
    if not directory.exists():
        raise ModelLoadError(f"model path {directory} does not exist")
    if not directory.is_dir():
        raise ModelLoadError(f"model path {directory} is not a directory")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"no config.json in {directory}: not a Hugging Face model directory")
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported (supported: {', '.join(DTYPES)})")
    torch_dtype, device = DTYPES[dtype], checked_device(device)
    hf = read_object(config_path)
    model_type = hf.get("model_type")
    if model_type not in convert.SUPPORTED:
        shown = model_type or ",".join(hf.get("architectures") or []) or "(no model_type)"
        raise ModelLoadError(f"unsupported architecture {shown!r} in {config_path} "
                             f"(supported: {', '.join(convert.SUPPORTED)})")
    task = model_task(hf, config_path)
    # Sparse by its architectures is a masked-LM checkpoint (SPLADE); BGE-M3's lexical weights
    # are sparse only when asked for (below).
    splade = task == "sparse"
    if expected_task == "sparse" and task == "embed":
        if not (directory / SPARSE_HEAD_FILE).is_file():
            raise ModelLoadError(f"task 'sparse' needs {SPARSE_HEAD_FILE} (BGE-M3's lexical "
                                 f"weight head) in {directory}; there is none")
        task = "sparse"
    architectures = hf.get("architectures") or []
    if expected_task == "rerank" and task == "embed" and "Qwen3ForCausalLM" in architectures:
        task = "rerank"  # Qwen3-Reranker: its answers' rows of the LM head score
    qwen3_reranker = task == "rerank" and model_type == "qwen3"
    if expected_task is not None and task != expected_task:
        shown = ", ".join(hf.get("architectures") or []) or model_type
        only = " (a masked-LM checkpoint serves SPLADE sparse vectors only)" if splade else ""
        raise ModelLoadError(f"{directory} is a checkpoint for task {task!r} ({shown}), not "
                             f"the {expected_task!r} asked for{only}")
    if task != "embed" and model_type not in convert.BERT_FAMILY and not qwen3_reranker:
        raise ModelLoadError(f"{config_path}: task {task!r} is not served for {model_type} "
                             f"(it is for {', '.join(convert.BERT_FAMILY)}, and rerank for a "
                             "Qwen3ForCausalLM: Qwen3-Reranker)")
    st = read_sentence_transformers(directory)
    if splade:
        _check_splade_pooling(directory)
    head = None
    checkpoint = Checkpoint(directory, device, torch_dtype)
    with bar(checkpoint.tensor_count, "loading weights", unit="tensor") as progress:
        checkpoint.progress = progress
        if model_type == "qwen3":
            config: BertConfig | Qwen3Config = convert.qwen3_config(hf, causal)
            if qwen3_reranker and not config.causal:
                raise ModelLoadError(f"{config_path}: Qwen3-Reranker reads its prompt with the "
                                     "causal mask it was trained with; bidirectional attention "
                                     "(config.json is_causal false, or causal=False) would "
                                     "change every score")
            with torch.device("meta"):
                model: nn.Module = Qwen3Model(config)
            weights = convert.qwen3_weights(checkpoint, config)
            default_pooling = "last" if config.causal else "mean"
            if qwen3_reranker:
                with torch.device("meta"):
                    head = AnswerHead(config.hidden_size)
                if "Qwen3ForSequenceClassification" in architectures:
                    head_weights = convert.qwen3_score_weights(checkpoint, hf)
                else:
                    head_weights = convert.qwen3_answer_weights(checkpoint, hf,
                                                                _answer_ids(directory))
        else:
            config = convert.bert_config(hf, task)
            with torch.device("meta"):
                model = BertModel(config)
            weights = (convert.distilbert_weights if model_type == "distilbert"
                       else convert.bert_weights)(checkpoint, config)
            default_pooling = "mean"
            if task == "rerank":
                labels, label = convert.relevance_label(hf)
                with torch.device("meta"):
                    head = ScoreHead(config.hidden_size, labels, label)
                head_weights = convert.score_head_weights(checkpoint, model_type)
            elif splade:
                mlm_weights, tied = convert.mlm_head_weights(checkpoint, hf)
        checkpoint.close()
    _check_fit(model, weights, directory)
    model.load_state_dict(weights, strict=True, assign=True)
    model.to(device)  # what the checkpoint does not hold (Qwen3's RoPE table) is on the CPU
    if splade:
        model = _with_mlm_head(model, mlm_weights, tied, directory)
    elif task == "sparse":
        model = _with_lexical_weights(model, directory, device, torch_dtype)
    model.eval().requires_grad_(False)
    if head is not None:
        _check_fit(head, head_weights, directory)
        head.load_state_dict(head_weights, strict=True, assign=True)
        # In float64, where a pair's score does not depend on its row in the batch (see
        # ScoreHead); the head is two small products, so this costs next to nothing.
        head.to(torch.float64).eval().requires_grad_(False)
    usable = config.usable_positions
    max_tokens = min(st.max_seq_length, usable) if st.max_seq_length else usable
    return LoadedModel(
        model=model,
        architecture=model_type,
        task=task,
        head=head,
        config=config,
        name=model_name(directory),
        # A cross-encoder's head reads the first token ([CLS] / <s>), Qwen3-Reranker's the
        # last (where its answer would come), whatever files say; lexical weights are per token;
        # SPLADE max-pools the MLM logits.
        pooling=(("last" if qwen3_reranker else "cls") if head is not None else SPLADE if splade
                 else TOKENS if task == "sparse" else st.pooling or default_pooling),
        normalize=True if st.normalize is None else st.normalize,
        max_tokens=max_tokens,
        templates=st.templates,
        dtype=torch_dtype,
        device=device,
    )
