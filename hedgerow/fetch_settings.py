"""`hedgerow fetch-model`'s one settings object, and the files it fetches by default.

Owns the knobs of the download that an EmbeddingService's `spec.model.huggingFace` turns into
(the init container's HEDGEROW_* variables are generated from these names, and the CRD's
allowPatterns default from DEFAULT_ALLOW_PATTERNS). The access token and the Hub's address are
huggingface_hub's own variables, HF_TOKEN and HF_ENDPOINT, read by that library: the token is
never a flag, so it cannot show in a process listing or a log of the settings. Plain data,
importable without huggingface_hub (the operator reads it).
"""

from dataclasses import dataclass
from pathlib import Path

from hedgerow.logs import LOG_LEVELS, format_setting
from hedgerow.settings import setting

# What Hedgerow serves from: the model's config and safetensors weights, the tokenizer, and
# the sentence-transformers files (pooling, normalisation, prompts). fnmatch patterns over the
# repository's paths, as huggingface_hub matches them (`*` also matches `/`).
DEFAULT_ALLOW_PATTERNS = (
    "config.json", "*.safetensors", "*.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "sentencepiece.bpe.model",
    "spiece.model",
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
    "*_Pooling/config.json",
)
# Left out with --skip-weights: a gateway reads the tokenizer and the configs, never these.
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack",
                   "*.onnx", "*.onnx_data", "*.gguf")

# Hugging Face repository ids (`org/name`, or a bare legacy `name`) and git revisions, as the
# Hub spells them; `--` and `..` are refused in code (the Hub refuses them; Kubernetes' regular
# expressions have no look-ahead to say so here).
_NAME = r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?"
REPO_ID = rf"({_NAME}/)?{_NAME}"
REVISION = r"[A-Za-z0-9_]([A-Za-z0-9_./-]*[A-Za-z0-9_])?"
COMMIT = r"[0-9a-f]{40}"


@dataclass(frozen=True)
class FetchSettings:
    repo: str | None = setting(
        None, "The model's Hugging Face repository id (org/name). Required.",
        pattern=REPO_ID, pattern_help="a repository id such as BAAI/bge-m3")
    revision: str | None = setting(
        None, "What to fetch: a commit hash (40 hex digits) or a tag; a branch only with "
        "--allow-moving-revision. Required.",
        pattern=REVISION, pattern_help="a commit hash, tag or branch name")
    cache: Path | None = setting(
        None, "The cache directory: each repository, commit and file set is kept in its own "
        "directory under it, written once (downloaded into a temporary directory and renamed "
        "when every file is verified) and reused by every later fetch of the same files, "
        "without a download. Processes sharing it (pods on one ReadWriteMany volume) download "
        "once: the others wait on a file lock. Required.", unit="path")
    link: Path | None = setting(
        None, "Also make this path a symbolic link to the fetched model directory (replaced "
        "atomically): the path a server's --model or a gateway's --model names.", unit="path")
    allow_patterns: tuple[str, ...] = setting(
        DEFAULT_ALLOW_PATTERNS, "Which of the repository's files to fetch (fnmatch patterns "
        "over its paths; `*` also matches `/`). The default is the config, safetensors "
        "weights, tokenizer and sentence-transformers files.", max_items=64)
    skip_weights: bool = setting(
        False, "Leave the weight files out (" + ", ".join(WEIGHT_PATTERNS) + "): a gateway "
        "reads only the tokenizer and the configs. A directory of the same commit with its "
        "weights, already in the cache, is used as it is.")
    allow_moving_revision: bool = setting(
        False, "Accept a branch as --revision. A branch moves: each fetch takes its commit of "
        "the moment, so two fetches may give two different models.")
    max_bytes: int | None = setting(
        None, "Refuse, before downloading, a file set larger than this (the operator passes "
        "the size limit of a per-pod cache volume, which the kubelet would otherwise enforce "
        "by evicting the pod). Unset: only the free space of the cache's filesystem is "
        "checked.", unit="bytes", minimum=1)
    lock_timeout: float = setting(
        3600.0, "Longest wait for another process's download of the same files into the same "
        "cache to finish.", unit="seconds", minimum=0.0)
    progress_interval: float = setting(
        10.0, "How often a download logs the bytes done and the total (a progress bar is drawn "
        "too when stderr is a terminal).", unit="seconds", minimum=0.1)
    message_file: Path | None = setting(
        None, "Also write the outcome here, one JSON object (the commit, whether it "
        "downloaded; or the error): the operator runs this command in an init container with "
        "/dev/termination-log, which the kubelet copies into the pod's status.", unit="path")
    log_level: str = setting("info", "Log verbosity (on stderr).", choices=LOG_LEVELS)
    log_format: str = format_setting()
