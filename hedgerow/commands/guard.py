"""`hedgerow guard record|check`: write a golden set, or hold a running gateway to one.

`record` loads a model directory in this process (as `hedgerow embed` does), measures its space
exactly as a server does (server/space.py: the same facts, probe set and rounding, so the
fingerprint it writes is the one a server of the same model, dtype and device reports), runs
the golden set through it by the model's task (`--task`, else the checkpoint's) and prints a
ConfigMap manifest (JSON, which `kubectl apply -f` takes) holding the golden set
(hedgerow/golden_set.py) that `spec.guard.configMap` names: an embedding model's vectors of
the golden texts (a file, one text per line, or the probe set Hedgerow ships), a
cross-encoder's raw scores of the golden pairs (a file, one `query<TAB>document` per line, or
the pairs Hedgerow ships), a sparse model's lexical weights of the golden texts. `check` sends
the golden set to a gateway's route for its task (/v1/embeddings; TEI's /rerank with
raw_scores, one call per query; TEI's /embed_sparse), measures the answer against the golden
set and judges it by the same rule as the operator's readiness gate
(hedgerow/warmup_report.py's `judge`); it prints a JSON report and exits 0 when the space
matches, 1 when it does not. Errors meant for the user (an unreachable gateway, a malformed
golden set, a gateway serving a model of another task) exit 2.
"""

import argparse
import dataclasses
import json
import logging
import re
import sys
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

from hedgerow import __version__, golden_set, logs, settings
from hedgerow.errors import ConfigError, HedgerowError, ModelLoadError
from hedgerow.settings import setting
from hedgerow.warmup_report import GoldenCheck, judge

HELP = ("Record the golden set that defines a model's space (a ConfigMap for spec.guard), "
        "or check a running gateway against one.")

log = logging.getLogger("hedgerow.guard")

SPACE_HEADER = "x-embedding-space"
PROBE_PAIRS_FILE = "probe_pairs.tsv"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    model: Path | None = setting(
        None, "Hugging Face model directory (config.json, safetensors, tokenizer.json). Unset "
        "uses the packaged all-MiniLM-L6-v2.", unit="path")
    texts: Path | None = setting(
        None, f"The golden texts, one per line (blank lines skipped; at most "
        f"{golden_set.MAX_TEXTS}). Unset: the probe set Hedgerow ships (hedgerow/"
        "probe_texts.txt: 32 short texts of several kinds and languages). For an embedding "
        "or sparse model.", unit="path")
    pairs: Path | None = setting(
        None, f"A cross-encoder's golden pairs, one `query<TAB>document` per line (blank lines "
        f"skipped; at most {golden_set.MAX_TEXTS}); the pairs of one query are its group, "
        "whose order the guard holds. Unset: the pairs Hedgerow ships (hedgerow/"
        f"{PROBE_PAIRS_FILE}: 8 queries of 4 documents each).", unit="path")
    task: str = setting(
        "auto", "The model's task, as `hedgerow server --task`: embed (vectors), rerank (a "
        "cross-encoder's pair scores) or sparse (BGE-M3's lexical weights); auto: what the "
        "checkpoint is (config.json architectures).", choices=("auto", *golden_set.TASKS))
    name: str = setting("golden-set", "Name of the ConfigMap (what spec.guard.configMap names).")
    namespace: str | None = setting(
        None, "Namespace of the ConfigMap; unset leaves it to kubectl's.")
    output: Path | None = setting(
        None, "Write the manifest to this file; unset prints it on stdout.", unit="path")
    device: str = setting("cpu", "Where the model runs: `cpu`, `cuda` or `cuda:N`.")
    dtype: str = setting(
        "float32",
        "Compute dtype. float32 records the most exact vectors; with --fingerprint-only, record "
        "in the dtype the servers run, whose fingerprint differs from float32's (float8 needs "
        "--device cuda on a GPU with FP8 tensor cores, as the servers do).",
        choices=("float32", "bfloat16", "float16", "auto", "float8"))
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
        "vector, dense or sparse (the default is spec.guard.minCosine's).", minimum=0.0,
        maximum=1.0)
    max_score_delta: float = setting(
        golden_set.DEFAULT_MAX_SCORE_DELTA, "A cross-encoder's golden set: largest difference "
        "of each pair's raw score from its recorded one, and how close two documents of one "
        "query may have been recorded for their order to swap (the default is "
        "spec.guard.maxScoreDelta's).", minimum=0.0)
    api_key: str | None = setting(None, "API key for the gateway, sent as a bearer token.",
                                  secret=True)
    timeout: float = setting(60.0, "Longest wait for the gateway's answer.", unit="seconds",
                             minimum=0.1)
    log_level: str = setting("info", "Log verbosity (on stderr).", choices=logs.LOG_LEVELS)
    log_format: str = logs.format_setting()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    record = actions.add_parser(
        "record", help="run the golden set through a model directory and print the ConfigMap",
        description="Run the golden texts (or, for a cross-encoder, pairs) through a model "
        "directory in this process and print the golden set as a ConfigMap manifest (JSON) "
        "for spec.guard.")
    settings.add_arguments(record, RecordSettings)
    check = actions.add_parser(
        "check", help="hold a running gateway to a golden set (exit 0: matches, 1: does not)",
        description="Send the golden set to a gateway's route for its task (/v1/embeddings, "
        "/rerank, /embed_sparse) and compare the answer with it; prints a JSON report, exits 0 "
        "when the space matches and 1 when it does not.")
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
    texts = [line for line in _read_text(f"--texts {path}", path).splitlines() if line.strip()]
    if not texts:
        raise ConfigError(f"--texts {path} holds no text (one text per line)")
    if len(texts) > golden_set.MAX_TEXTS:
        raise ConfigError(f"--texts {path} holds {len(texts)} texts; a golden set holds at most "
                          f"{golden_set.MAX_TEXTS}")
    return texts


def _read_text(where: str, path: Path) -> str:
    """The UTF-8 text of a golden-set input file; ConfigError naming `where` if unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None


def read_pairs(path: Path | None) -> list[tuple[str, str]]:
    """The golden pairs: the file's non-blank `query<TAB>document` lines, or the shipped set."""
    where = f"--pairs {path}"
    if path is None:
        text = resources.files("hedgerow").joinpath(PROBE_PAIRS_FILE).read_text(encoding="utf-8")
    else:
        text = _read_text(where, path)
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise ConfigError(f"{where} line {number}: write one pair a line, the query and the "
                              "document separated by one tab")
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ConfigError(f"{where} holds no pair (one `query<TAB>document` a line)")
    if len(pairs) > golden_set.MAX_TEXTS:
        raise ConfigError(f"{where} holds {len(pairs)} pairs; a golden set holds at most "
                          f"{golden_set.MAX_TEXTS}")
    return pairs


def checkpoint_task(directory: Path, asked: str) -> str:
    """The task to record in: `asked`, or (auto) the checkpoint's, read from its config.json
    without loading the weights."""
    from hedgerow.model_files import model_task, read_object, readable

    if asked != "auto":
        return asked
    config = directory / "config.json"
    with readable(directory):
        if not config.is_file():
            raise ModelLoadError(f"no config.json in {directory}")
        return model_task(read_object(config), config)


def record(config: RecordSettings) -> int:
    logs.configure(config.log_level, config.log_format)
    if not DNS_SUBDOMAIN.match(config.name) or len(config.name) > 253:
        raise ConfigError(f"--name {config.name!r} is not a ConfigMap name (lowercase letters, "
                          "digits, '-' and '.')")
    from hedgerow.defaults import default_model_path

    directory = Path(config.model if config.model is not None else default_model_path())
    # Before loading anything: a bad file, folder or flag for this model's task fails at once.
    task = checkpoint_task(directory, config.task)
    if task == "rerank":
        if config.texts is not None or config.input_type is not None:
            flag = "--texts" if config.texts is not None else "--input-type"
            raise ConfigError(f"{flag} is for an embedding or sparse model; {directory} is "
                              "recorded as a cross-encoder (task rerank), whose golden set "
                              "holds query-document pairs (--pairs)")
        pairs, texts = read_pairs(config.pairs), []
    else:
        if config.pairs is not None:
            raise ConfigError(f"--pairs is for a cross-encoder (task rerank); {directory} is "
                              f"recorded as task {task}: give its golden texts with --texts")
        pairs, texts = [], read_texts(config.texts)
    if config.output is not None and not config.output.parent.is_dir():
        raise ConfigError(f"--output {config.output}: the folder {config.output.parent} does "
                          "not exist")

    from hedgerow.engine.engine import Engine
    from hedgerow.server import space
    from hedgerow.server.sparse import special_ids
    from hedgerow.tokenizer_file import encode_pairs, encode_texts

    weights = space.start_weights_digest(directory)
    engine = Engine.load(directory, device=config.device, dtype=config.dtype, task=task)
    info = engine.info
    text_tokenizer = space.tokenizer(directory)
    if text_tokenizer is None:
        raise ModelLoadError(f"no tokenizer.json in {directory}: the golden set needs it")
    measured = space.measure(engine, directory, text_tokenizer, weights)
    answers: dict = {}
    if task == "rerank":
        ids, types = encode_pairs(text_tokenizer, pairs, info.max_tokens, info.vocab_size)
        if not config.fingerprint_only:
            answers["scores"] = tuple(space.score_pairs(engine, ids, types).tolist())
    else:
        prefix = info.templates.get(config.input_type, "") if config.input_type else ""
        ids = encode_texts(text_tokenizer, texts, prefix, info.max_tokens, info.vocab_size)
        if task == "sparse" and not config.fingerprint_only:
            answers["sparse_vectors"] = tuple(
                space.sparse_vectors(engine, ids, special_ids(directory)))
        elif not config.fingerprint_only:
            rows = space.embed_sequences(engine, ids)
            answers["vectors"] = tuple(tuple(row) for row in rows.tolist())
    golden = golden_set.GoldenSet(
        model=info.name, fingerprint=measured.fingerprint,
        dimensions=info.dimensions if task == "embed" else None, texts=tuple(texts),
        vectors=answers.get("vectors"), input_type=config.input_type,
        recorded_with={"dtype": info.dtype, "device": info.device, "hedgerow": __version__},
        task=task, pairs=tuple(pairs), scores=answers.get("scores"),
        sparse_vectors=answers.get("sparse_vectors"))
    manifest = json.dumps(golden.config_map(config.name, config.namespace), indent=2) + "\n"
    log.info("%s", logs.fields(event="guard.recorded", model=info.name, task=task,
                               size=golden.size, fingerprint=measured.fingerprint,
                               dtype=info.dtype, measured=golden.measured))
    if config.output is None:
        sys.stdout.write(manifest)
        sys.stdout.flush()
    else:
        try:
            config.output.write_text(manifest)
        except OSError as error:
            raise ConfigError(f"--output {config.output}: {error.strerror}") from None
    return 0


ROUTES = {"embed": "/v1/embeddings", "rerank": "/rerank", "sparse": "/embed_sparse"}


def base_url(url: str) -> str:
    """The gateway's base URL (a route of it given is cut off)."""
    base = url.rstrip("/")
    if not re.match(r"^https?://[^/]", base):
        raise ConfigError(f"URL {url!r} is not an http:// or https:// address of a gateway")
    for route in ROUTES.values():
        base = base.removesuffix(route)
    return base


def served_task(base: str, config: CheckSettings) -> tuple[str, str] | None:
    """(the served model's name, its task) as the gateway's GET /info (TEI's shape) says, or
    None when it does not answer one (then the route's own answer has to say)."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    request = urllib.request.Request(base + "/info", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as answer:
            info = json.loads(answer.read())
        kind = info["model_type"]
        if "reranker" in kind:
            return info["model_id"], "rerank"
        return info["model_id"], "sparse" if kind["embedding"]["pooling"] == "splade" else "embed"
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None


def post(url: str, body: dict, config: CheckSettings, task: str) -> tuple[object, str]:
    """The gateway's JSON answer to `body` at `url`, and the space its header names."""
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as answer:
            space_header, raw = answer.headers.get(SPACE_HEADER, ""), answer.read()
    except urllib.error.HTTPError as error:
        said = _error_message(error)
        if task != "embed" or "of task" in said:  # the route of another task, or its refusal
            said += f" (the golden set was recorded for task {task})"
        raise HedgerowError(f"{url} answered HTTP {error.code}: {said}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise HedgerowError(f"cannot reach {url}: {reason}") from None
    try:
        return json.loads(raw), space_header
    except ValueError:
        raise HedgerowError(f"{url} answered something that is not JSON") from None


def fetch(url: str, golden: golden_set.GoldenSet, config: CheckSettings) -> tuple[list, str]:
    """The gateway's vectors of the golden texts, and the space it says they live in."""
    body = {"input": list(golden.texts)}
    if golden.input_type:
        body["input_type"] = golden.input_type
    data, space_header = post(url, body, config, "embed")
    try:
        vectors = [item["embedding"] for item in sorted(data["data"], key=lambda d: d["index"])]
    except (KeyError, TypeError) as error:
        raise HedgerowError(f"{url} answered something that is not an embeddings list: "
                            f"{error!r}") from None
    if len(vectors) != len(golden.texts):
        raise HedgerowError(f"{url} answered {len(vectors)} vectors for {len(golden.texts)} texts")
    return vectors, data.get("embedding_space") or space_header


def fetch_scores(url: str, golden: golden_set.GoldenSet, config: CheckSettings
                 ) -> tuple[list[float], str]:
    """The gateway's raw scores of the golden pairs (TEI's /rerank with raw_scores, one call
    per query, nothing truncated), in the pairs' order, and the space it names."""
    groups: dict[str, list[int]] = {}
    for index, (query, _) in enumerate(golden.pairs):
        groups.setdefault(query, []).append(index)
    scores: list[float | None] = [None] * len(golden.pairs)
    spaces = set()
    for query, members in groups.items():
        body = {"query": query, "texts": [golden.pairs[i][1] for i in members],
                "raw_scores": True, "truncate": False}
        data, space_header = post(url, body, config, "rerank")
        try:
            ranked = {int(item["index"]): float(item["score"]) for item in data}
        except (KeyError, TypeError, ValueError) as error:
            raise HedgerowError(f"{url} answered something that is not a ranking: {error!r}"
                                ) from None
        if sorted(ranked) != list(range(len(members))):
            raise HedgerowError(f"{url} ranked {len(ranked)} of the {len(members)} documents of "
                                f"the query {query!r}")
        for position, index in enumerate(members):
            scores[index] = ranked[position]
        spaces.add(space_header)
    return scores, _one_space(spaces, url)


def fetch_sparse(url: str, golden: golden_set.GoldenSet, config: CheckSettings
                 ) -> tuple[list[dict[int, float]], str]:
    """The gateway's sparse vectors of the golden texts (TEI's /embed_sparse, nothing
    truncated), and the space it names."""
    body = {"inputs": list(golden.texts), "truncate": False}
    if golden.input_type:
        body["prompt_name"] = golden.input_type
    data, space_header = post(url, body, config, "sparse")
    try:
        vectors = [{int(e["index"]): float(e["value"]) for e in vector} for vector in data]
    except (KeyError, TypeError, ValueError) as error:
        raise HedgerowError(f"{url} answered something that is not a list of sparse vectors: "
                            f"{error!r}") from None
    if len(vectors) != len(golden.texts):
        raise HedgerowError(f"{url} answered {len(vectors)} sparse vectors for "
                            f"{len(golden.texts)} texts")
    return vectors, space_header


def _one_space(spaces: set[str], url: str) -> str:
    if len(spaces) > 1:  # calls a rollout split between two spaces
        raise HedgerowError(f"{url} answered from more than one space ({', '.join(sorted(spaces))}"
                            "); check again once the rollout is done")
    return next(iter(spaces), "")


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of an error answer: OpenAI's {"error": {"message"}} or TEI's {"error"}."""
    try:
        said = json.loads(error.read())["error"]
        return said["message"] if isinstance(said, dict) else str(said)
    except (ValueError, KeyError, TypeError, OSError):
        return error.reason or "no detail"


def measure(url: str, golden: golden_set.GoldenSet, config: CheckSettings
            ) -> tuple[GoldenCheck, str]:
    """Ask the gateway for the golden set's answers and measure them: (the check, the space
    the gateway names)."""
    measured = GoldenCheck(fingerprint=golden.fingerprint, texts=golden.size, task=golden.task)
    if golden.task == "rerank":
        scores, space = fetch_scores(url, golden, config)
        if golden.scores is None:
            return measured, space
        delta, flipped = golden_set.score_drift(scores, golden.scores, golden.pairs)
        return dataclasses.replace(measured, max_score_delta=delta,
                                   max_flipped_gap=flipped), space
    if golden.task == "sparse":
        weights, space = fetch_sparse(url, golden, config)
        if golden.sparse_vectors is None:
            return measured, space
        return dataclasses.replace(measured, min_cosine=golden_set.min_sparse_cosine(
            weights, golden.sparse_vectors)), space
    vectors, space = fetch(url, golden, config)
    if golden.vectors is None:
        return measured, space
    widths = {len(vector) for vector in vectors}
    if widths != {golden.dimensions}:
        return dataclasses.replace(measured, problem=(
            f"the gateway answered vectors of {sorted(widths)} dimensions, the golden set "
            f"holds {golden.dimensions}")), space
    return dataclasses.replace(
        measured, min_cosine=golden_set.min_cosine(vectors, golden.vectors)), space


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
    base = base_url(url)
    served = served_task(base, config)
    if served is not None and served[1] != golden.task:
        raise HedgerowError(
            f"{base} serves model {served[0]!r} of task {served[1]}; the golden set was recorded "
            f"for task {golden.task} ({golden_set.HOLDS[golden.task]}) from model "
            f"{golden.model!r}: check it against a gateway serving that model")
    measured, space = measure(base + ROUTES[golden.task], golden, config)
    verdict = judge(space or None, measured, config.min_cosine, config.max_score_delta)
    report = {"matches": verdict.matches, "message": verdict.message, "space": space or None,
              "golden_fingerprint": golden.fingerprint, "task": golden.task,
              "texts": golden.size}
    if golden.task == "rerank":
        report.update(max_score_delta=measured.max_score_delta,
                      max_flipped_gap=measured.max_flipped_gap, maximum=config.max_score_delta)
    else:
        report.update(min_cosine=measured.min_cosine, minimum=config.min_cosine)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0 if verdict.matches else 1
