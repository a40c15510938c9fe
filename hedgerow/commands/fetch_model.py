"""`hedgerow fetch-model`: fetch a Hugging Face model into a cache directory, verified.

The init container of every server and gateway pod of an EmbeddingService with
`spec.model.huggingFace` runs this (the server image); it works the same anywhere else. The
steps, the cache's layout and the errors are hedgerow/model_fetch.py's and
hedgerow/model_cache.py's; this module reads the settings, logs the outcome and writes it to
`--message-file` (one JSON object: the operator reads the pod's termination message for the
commit, or for the error to show in the ModelFetched condition). Errors meant for the user
exit 2 with one line saying what to change.
"""

import argparse
import json
import logging
from pathlib import Path

from hedgerow import logs, settings
from hedgerow.errors import ConfigError, HedgerowError
from hedgerow.fetch_settings import FetchSettings
from hedgerow.logs import fields

HELP = ("Fetch a Hugging Face model into a cache directory: every file verified against the "
        "hub's digests, written once, reused by later fetches without a download.")

log = logging.getLogger("hedgerow.fetch")

# The kubelet keeps at most 4096 bytes of a termination message.
MAX_MESSAGE_BYTES = 4096


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("The hub is huggingface_hub's: HF_ENDPOINT names a mirror or an "
                     "air-gapped hub (default https://huggingface.co), HF_TOKEN the access "
                     "token of a private or gated model (never logged).")
    settings.add_arguments(parser, FetchSettings)


def _required(config: FetchSettings) -> None:
    for name in ("repo", "revision", "cache"):
        if getattr(config, name) is None:
            raise ConfigError(f"--{name} is required (or HEDGEROW_{name.upper()})")


def _write_message(path: Path | None, record: dict) -> None:
    if path is None:
        return
    text = json.dumps(record, ensure_ascii=False)
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        record = {**record, "error": record["error"][:MAX_MESSAGE_BYTES // 2] + "..."}
        text = json.dumps(record, ensure_ascii=False)
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as error:
        log.warning("%s", fields(event="fetch.message_file", path=path, error=error.strerror))


def run(args: argparse.Namespace) -> int:
    config = settings.load(FetchSettings, args)
    logs.configure(config.log_level, config.log_format)
    if config.log_level != "debug":  # huggingface_hub's HTTP client logs every request
        logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        _required(config)
        from hedgerow.model_fetch import fetch  # huggingface_hub: only when fetching

        fetched = fetch(config)
    except HedgerowError as error:
        _write_message(config.message_file, {"ok": False, "repo": config.repo,
                                             "revision": config.revision, "error": str(error)})
        raise
    record = fetched.record()
    log.info("%s", fields(event="fetch.done", **record, directory=fetched.directory,
                          link=config.link))
    _write_message(config.message_file, record)
    return 0
