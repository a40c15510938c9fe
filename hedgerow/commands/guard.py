"""`hedgerow guard record|check`: write a golden set, or hold a running gateway to one.

`record` loads a model directory in this process (as `hedgerow embed` does), measures its space
exactly as a server does (server/space.py: the same facts, probe set and rounding, so the
fingerprint it writes is the one a server of the same model, dtype and device reports),
embeds the golden texts (a file, one text per line, or the probe set Hedgerow ships) and
prints a ConfigMap manifest (JSON, which `kubectl apply -f` takes) holding the golden set
(hedgerow/golden_set.py) that `spec.guard.configMap` names. `check` sends the golden texts to
a gateway's /v1/embeddings, measures the smallest cosine of the answer to the recorded vectors
and judges it by the same rule as the operator's readiness gate (hedgerow/warmup_report.py's
`judge`); it prints a JSON report and exits 0 when the space matches, 1 when it does not.
Errors meant for the user (an unreachable gateway, a malformed golden set) exit 2.
"""

import argparse
import dataclasses
import json
import logging
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

from hedgerow import __version__, golden_set, logs, settings
from hedgerow.errors import ConfigError, HedgerowError, ModelLoadError
from hedgerow.settings import setting
from hedgerow.warmup_report import GoldenCheck, judge

HELP = ("Record the golden set that defines an embedding space (a ConfigMap for spec.guard), "
        "or check a running gateway against one.")

log = logging.getLogger("hedgerow.guard")

SPACE_HEADER = "x-embedding-space"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    model: Path | None = setting(
        None, "Hugging Face model directory (config.json, safetensors, tokenizer.json). Unset "
        "uses the packaged all-MiniLM-L6-v2.", unit="path")
    texts: Path | None = setting(
        None, f"The golden texts, one per line (blank lines skipped; at most "
        f"{golden_set.MAX_TEXTS}). Unset: the probe set Hedgerow ships (hedgerow/"
        "probe_texts.txt: 32 short texts of several kinds and languages).", unit="path")
    name: str = setting("golden-set", "Name of the ConfigMap (what spec.guard.configMap names).")
    namespace: str | None = setting(
        None, "Namespace of the ConfigMap; unset leaves it to kubectl's.")
    output: Path | None = setting(
        None, "Write the manifest to this file; unset prints it on stdout.", unit="path")
    device: str = setting("cpu", "Where the model runs: `cpu`, `cuda` or `cuda:N`.")
    dtype: str = setting(
        "float32",
        "Compute dtype. float32 records the most exact vectors; with --fingerprint-only, record "
        "in the dtype the servers run, whose fingerprint differs from float32's.",
        choices=("float32", "bfloat16", "float16", "auto"))
    input_type: str | None = setting(
        None, "Embed every golden text with the model's template for this input type (the "
        "gateway's input_type); unset applies none.", choices=golden_set.INPUT_TYPES)
    fingerprint_only: bool = setting(
        False, "Record the texts and the fingerprint, without vectors: the servers must then "
        "report that exact fingerprint (same model, dtype and numerics), where vectors admit "
        "any replica within spec.guard.minCosine.")
    log_level: str = setting("info", "Log verbosity (on stderr).", choices=logs.LOG_LEVELS)
    log_format: str = logs.format_setting()


@dataclasses.dataclass(frozen=True)
class CheckSettings:
    golden: Path | None = setting(
        None, "The golden set: the manifest `hedgerow guard record` wrote, `kubectl get "
        "configmap NAME -o json`, or the bare golden-set.json. Required.", unit="path")
    min_cosine: float = setting(
        golden_set.DEFAULT_MIN_COSINE, "Smallest cosine each answer must keep to its recorded "
        "vector (the default is spec.guard.minCosine's).", minimum=0.0, maximum=1.0)
    api_key: str | None = setting(None, "API key for the gateway, sent as a bearer token.",
                                  secret=True)
    timeout: float = setting(60.0, "Longest wait for the gateway's answer.", unit="seconds",
                             minimum=0.1)
    log_level: str = setting("info", "Log verbosity (on stderr).", choices=logs.LOG_LEVELS)
    log_format: str = logs.format_setting()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    record = actions.add_parser(
        "record", help="embed the golden texts with a model directory and print the ConfigMap",
        description="Embed the golden texts with a model directory in this process and print "
        "the golden set as a ConfigMap manifest (JSON) for spec.guard.")
    settings.add_arguments(record, RecordSettings)
    check = actions.add_parser(
        "check", help="hold a running gateway to a golden set (exit 0: matches, 1: does not)",
        description="Send the golden texts to a gateway's /v1/embeddings and compare the answer "
        "with the golden set; prints a JSON report, exits 0 when the space matches and 1 when "
        "it does not.")
    check.add_argument("url", metavar="URL",
                       help="the gateway's base URL, e.g. http://localhost:8080")
    settings.add_arguments(check, CheckSettings)


def run(args: argparse.Namespace) -> int:
    if args.action == "record":
        return record(settings.load(RecordSettings, args))
    if args.action == "check":
        return check(settings.load(CheckSettings, args), args.url)
    raise ConfigError("name an action: record or check (hedgerow guard ACTION --help)")


def read_texts(path: Path | None) -> list[str]:
    """The golden texts: the file's non-blank lines, or the shipped probe set."""
    from hedgerow import space

    if path is None:
        return space.probe_texts()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ConfigError(f"--texts {path}: cannot read it: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--texts {path} is not UTF-8 text") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise ConfigError(f"--texts {path} holds no text (one text per line)")
    if len(texts) > golden_set.MAX_TEXTS:
        raise ConfigError(f"--texts {path} holds {len(texts)} texts; a golden set holds at most "
                          f"{golden_set.MAX_TEXTS}")
    return texts


def record(config: RecordSettings) -> int:
    logs.configure(config.log_level, config.log_format)
    if not DNS_SUBDOMAIN.match(config.name) or len(config.name) > 253:
        raise ConfigError(f"--name {config.name!r} is not a ConfigMap name (lowercase letters, "
                          "digits, '-' and '.')")
    # Before loading anything: a bad file or folder fails at once.
    texts = read_texts(config.texts)
    if config.output is not None and not config.output.parent.is_dir():
        raise ConfigError(f"--output {config.output}: the folder {config.output.parent} does "
                          "not exist")

    from hedgerow.defaults import default_model_path
    from hedgerow.engine.engine import Engine
    from hedgerow.server import space
    from hedgerow.tokenizer_file import encode_texts

    directory = Path(config.model if config.model is not None else default_model_path())
    weights = space.start_weights_digest(directory)
    engine = Engine.load(directory, device=config.device, dtype=config.dtype)
    info = engine.info
    text_tokenizer = space.tokenizer(directory)
    if text_tokenizer is None:
        raise ModelLoadError(f"no tokenizer.json in {directory}: the golden texts need it")
    measured = space.measure(engine, directory, text_tokenizer, weights)
    prefix = info.templates.get(config.input_type, "") if config.input_type else ""
    sequences = encode_texts(text_tokenizer, texts, prefix, info.max_tokens, info.vocab_size)
    vectors = None
    if not config.fingerprint_only:
        rows = space.embed_sequences(engine, sequences)
        vectors = tuple(tuple(row) for row in rows.tolist())
    golden = golden_set.GoldenSet(
        model=info.name, fingerprint=measured.fingerprint, dimensions=info.dimensions,
        texts=tuple(texts), vectors=vectors, input_type=config.input_type,
        recorded_with={"dtype": info.dtype, "device": info.device, "hedgerow": __version__})
    manifest = json.dumps(golden.config_map(config.name, config.namespace), indent=2) + "\n"
    log.info("%s", logs.fields(event="guard.recorded", model=info.name, texts=len(texts),
                               fingerprint=measured.fingerprint, dtype=info.dtype,
                               vectors=vectors is not None))
    if config.output is None:
        sys.stdout.write(manifest)
        sys.stdout.flush()
    else:
        try:
            config.output.write_text(manifest)
        except OSError as error:
            raise ConfigError(f"--output {config.output}: {error.strerror}") from None
    return 0


def embeddings_url(url: str) -> str:
    base = url.rstrip("/")
    if not re.match(r"^https?://[^/]", base):
        raise ConfigError(f"URL {url!r} is not an http:// or https:// address of a gateway")
    return base if base.endswith("/v1/embeddings") else base + "/v1/embeddings"


def fetch(url: str, golden: golden_set.GoldenSet, config: CheckSettings) -> tuple[list, str]:
    """The gateway's vectors of the golden texts, and the space it says they live in."""
    body = {"input": list(golden.texts)}
    if golden.input_type:
        body["input_type"] = golden.input_type
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as answer:
            space_header, raw = answer.headers.get(SPACE_HEADER, ""), answer.read()
    except urllib.error.HTTPError as error:
        raise HedgerowError(f"{url} answered HTTP {error.code}: {_error_message(error)}"
                            ) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise HedgerowError(f"cannot reach {url}: {reason}") from None
    try:
        data = json.loads(raw)
        vectors = [item["embedding"] for item in sorted(data["data"], key=lambda d: d["index"])]
    except (ValueError, KeyError, TypeError) as error:
        raise HedgerowError(f"{url} answered something that is not an embeddings list: "
                            f"{error!r}") from None
    if len(vectors) != len(golden.texts):
        raise HedgerowError(f"{url} answered {len(vectors)} vectors for {len(golden.texts)} texts")
    return vectors, data.get("embedding_space") or space_header


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        return json.loads(error.read())["error"]["message"]
    except (ValueError, KeyError, TypeError, OSError):
        return error.reason or "no detail"


def check(config: CheckSettings, url: str) -> int:
    logs.configure(config.log_level, config.log_format)
    if config.golden is None:
        raise ConfigError("pass --golden FILE: the golden set to check against")
    try:
        golden = golden_set.parse(config.golden.read_bytes(), f"--golden {config.golden}")
    except OSError as error:
        raise ConfigError(f"--golden {config.golden}: cannot read it: {error.strerror}") from None
    except golden_set.GoldenSetError as error:
        raise ConfigError(str(error)) from None
    vectors, space = fetch(embeddings_url(url), golden, config)
    measured = GoldenCheck(fingerprint=golden.fingerprint, texts=len(golden.texts))
    if golden.vectors is not None:
        widths = {len(vector) for vector in vectors}
        if widths != {golden.dimensions}:
            measured = dataclasses.replace(measured, problem=(
                f"the gateway answered vectors of {sorted(widths)} dimensions, the golden set "
                f"holds {golden.dimensions}"))
        else:
            measured = dataclasses.replace(
                measured, min_cosine=golden_set.min_cosine(vectors, golden.vectors))
    verdict = judge(space or None, measured, config.min_cosine)
    report = {"matches": verdict.matches, "message": verdict.message, "space": space or None,
              "golden_fingerprint": golden.fingerprint, "texts": len(golden.texts),
              "min_cosine": measured.min_cosine, "minimum": config.min_cosine}
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0 if verdict.matches else 1
