"""Fetching a model from a Hugging Face hub into the model cache, verified, written once.

Owns the steps of one fetch. Resolve the revision to a commit (a commit hash needs no request;
a branch is refused unless moving revisions are allowed). Reuse the cache's directory for that
commit and file set when there is one: no download. Otherwise, under the cache's lock for it
(hedgerow/model_cache.py): look again (another process may have just fetched it), list the
files at the commit with their sizes and digests, check that Hedgerow can serve them and that
they fit, download them with huggingface_hub's `snapshot_download` into a staging directory
(progress logged every interval), verify every file against the hub's listing (sha256 for LFS
files, the git blob id for the others), record the source (hedgerow/model_source.py) and
rename the directory into place. A failure at any step leaves nothing where a server could
load it, and raises FetchError with a message that says what to fix (`_hub_errors` translates
the hub's answers). The token (HF_TOKEN) and the hub's address (HF_ENDPOINT) are
huggingface_hub's; the token never reaches a message. Knows nothing about Kubernetes.
"""

import contextlib
import dataclasses
import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Iterator

import filelock
import httpx2
from huggingface_hub import HfApi, constants, get_token, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
    OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import disable_progress_bars, filter_repo_objects

from hedgerow import model_source, progress
from hedgerow.errors import HedgerowError
from hedgerow.fetch_settings import COMMIT, WEIGHT_PATTERNS, FetchSettings
from hedgerow.logs import fields
from hedgerow.model_cache import Cache, files_digest, point_link

log = logging.getLogger("hedgerow.fetch")

_CHUNK = 1 << 20
_TICK_SECONDS = 0.5  # how often the progress bar is redrawn
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


class FetchError(HedgerowError):
    """The model could not be fetched; the message says why and what to change."""


@dataclasses.dataclass(frozen=True)
class Fetched:
    """The outcome: the model directory, the commit, and whether this process downloaded."""

    repo: str
    revision: str
    commit: str
    directory: Path
    downloaded: bool
    files: int
    bytes: int

    def record(self) -> dict:
        """What the operator reads from the pod's termination message."""
        return {"ok": True, "repo": self.repo, "revision": self.revision, "commit": self.commit,
                "downloaded": self.downloaded, "files": self.files, "bytes": self.bytes}


def _token_hint() -> str:
    if get_token():
        return "with the token given (HF_TOKEN)"
    return ("without a token: a private or gated model needs one with access (HF_TOKEN; on "
            "Kubernetes spec.model.huggingFace.tokenSecret)")


@contextlib.contextmanager
def _hub_errors(repo: str, revision: str) -> Iterator[None]:
    """The hub's answers, and failures to reach it, as FetchErrors that say what to fix."""
    endpoint = constants.ENDPOINT
    try:
        yield
    except GatedRepoError:
        raise FetchError(f"{repo} is gated: accept its conditions at {endpoint}/{repo} with the "
                         f"account of a token, and give that token; the request was made "
                         f"{_token_hint()}") from None
    except RepositoryNotFoundError:
        raise FetchError(f"{repo} was not found on {endpoint} {_token_hint()}; check the id "
                         "(org/name), and that the token's account can read it") from None
    except RevisionNotFoundError:
        raise FetchError(f"revision {revision!r} is not a branch, tag or commit of {repo} on "
                         f"{endpoint}") from None
    except HfHubHTTPError as error:
        status = error.response.status_code
        said = f": {error.server_message}" if error.server_message else ""
        if status == 401:
            raise FetchError(f"{endpoint} refused the request for {repo} (HTTP 401{said}) "
                             f"{_token_hint()}: give a valid token") from None
        if status == 403:
            raise FetchError(f"the token has no read access to {repo} (HTTP 403{said}): give "
                             "a token that can read it") from None
        raise FetchError(f"{endpoint} answered HTTP {status} for {repo}{said}") from None
    except OfflineModeIsEnabled:
        raise FetchError(f"HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, and {repo} at "
                         f"{revision!r} is not in the cache: unset it to fetch") from None
    except (httpx2.TransportError, LocalEntryNotFoundError) as error:
        raise FetchError(f"cannot reach {endpoint} for {repo} ({type(error).__name__}: "
                         f"{error}); a mirror or an air-gapped hub is named by HF_ENDPOINT"
                         ) from None
    except HFValidationError as error:
        raise FetchError(f"{repo!r} is not a Hugging Face repository id: {error}") from None


def _no_room(cache: Path, needed: int, during: bool) -> FetchError:
    free = shutil.disk_usage(cache).free
    happened = ("ran out of room during the download (the partial download is removed)"
                if during else "has too little room")
    return FetchError(f"the cache at {cache} {happened}: the model needs {needed} bytes and "
                      f"{free} are free; give the cache more room (on Kubernetes "
                      "spec.model.huggingFace.cache: a larger sizeLimit or PVC)")


def _unwritable(where: Path, error: OSError) -> FetchError:
    return FetchError(f"cannot write into the cache at {where}: {error.strerror or error}"
                      f"{f' ({error.filename})' if error.filename else ''}; it must be a "
                      f"directory this user (uid {os.getuid()}) can write")


def resolve(api: HfApi, repo: str, revision: str, allow_moving: bool) -> str:
    """The commit `revision` names now; a FetchError for a branch unless `allow_moving`."""
    if re.fullmatch(COMMIT, revision):
        return revision
    commit = api.repo_info(repo, revision=revision).sha
    if allow_moving or re.fullmatch(r"[0-9a-f]{7,40}", revision) and commit.startswith(revision):
        return commit
    refs = api.list_repo_refs(repo)
    if revision in {name for tag in refs.tags for name in (tag.name, tag.ref)}:
        return commit
    raise FetchError(f"revision {revision!r} of {repo} is a branch, which moves (it is at "
                     f"commit {commit} now): give that commit, or a tag, as the revision, or "
                     "allow a moving revision (--allow-moving-revision; on Kubernetes "
                     "spec.model.huggingFace.allowMovingRevision)")


def _servable(files: list[RepoFile], repo: str, commit: str, skip_weights: bool) -> None:
    """Refuse, before any download, a file set Hedgerow cannot serve from."""
    paths = {f.path for f in files}
    wanted = ["config.json", "tokenizer.json"]
    missing = [path for path in wanted if path not in paths]
    if not skip_weights and not any(path.endswith(".safetensors") for path in paths):
        missing.append("*.safetensors (Hedgerow loads safetensors weights only)")
    if missing:
        raise FetchError(f"{repo} at commit {commit} has no {', '.join(missing)} among the "
                         f"files the patterns select ({len(paths)}: "
                         f"{', '.join(sorted(paths)) or 'none'}); check the id, the revision "
                         "and the allow patterns")


def _digest(path: Path, kind: str, size: int) -> str:
    """sha256 of the file, or its git blob id (sha1 of a `blob <size>` header and the bytes)."""
    digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(directory: Path, files: list[RepoFile]) -> dict[str, str]:
    """Check every file against the hub's listing; returns path -> "kind:digest"."""
    digests = {}
    for entry in files:
        path = directory / entry.path
        if not path.is_file():
            raise FetchError(f"{entry.path} is missing after the download")
        size = path.stat().st_size
        if size != entry.size:
            raise FetchError(f"{entry.path} has {size} bytes, the hub lists {entry.size}: the "
                             "download is corrupt or the hub serves another file")
        kind, expected = ("sha256", entry.lfs.sha256) if entry.lfs else ("git-sha1", entry.blob_id)
        actual = _digest(path, kind, size)
        if actual != expected:
            raise FetchError(f"{entry.path}: {kind} {actual}, the hub lists {expected}: the "
                             "download is corrupt or the hub (or a proxy) serves another file; "
                             "nothing was kept")
        digests[entry.path] = f"{kind}:{actual}"
    return digests


def _bytes_under(directory: Path) -> int:
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # renamed as we look
                total += os.stat(os.path.join(root, name)).st_size
    return total


@contextlib.contextmanager
def _progress(directory: Path, total: int, interval: float, what: str) -> Iterator[None]:
    """Log the bytes under `directory` (what huggingface_hub has written, finished or not)
    every `interval` seconds while the block runs, and once at its end; draw a bar on a
    terminal."""
    stop = threading.Event()

    def report() -> None:
        done = min(_bytes_under(directory), total)
        log.info("%s", fields(event="fetch.progress", bytes_done=done, bytes_total=total,
                              percent=f"{100.0 * done / max(total, 1):.1f}"))

    with progress.bar(total, what, unit="B", unit_scale=True) as bar:
        def watch() -> None:
            logged = time.monotonic()
            while not stop.wait(_TICK_SECONDS):
                bar.update(min(_bytes_under(directory), total) - bar.n)
                if time.monotonic() - logged >= interval:
                    logged = time.monotonic()
                    report()

        watcher = threading.Thread(target=watch, name="hedgerow-fetch-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
    report()


def _found(cache: Cache, repo: str, commit: str, digests: list[str]) -> Path | None:
    """A complete model directory of `commit` for one of the file sets `digests`, or None."""
    for files in digests:
        directory = cache.model_dir(repo, commit, files)
        if (directory / model_source.SOURCE_FILE).is_file():
            return directory
    return None


def fetch(settings: FetchSettings) -> Fetched:
    """Fetch `settings.repo` at `settings.revision` into `settings.cache` (see the module's
    docstring); point `settings.link` at it."""
    disable_progress_bars()  # ours shows the whole download, in bytes
    repo, revision = settings.repo, settings.revision
    ignore = WEIGHT_PATTERNS if settings.skip_weights else ()
    files = files_digest(settings.allow_patterns, ignore)
    # A gateway (skip_weights) may use a directory of the same commit with its weights.
    candidates = [files] + ([files_digest(settings.allow_patterns, ())] if ignore else [])
    cache, api = Cache(settings.cache), HfApi()
    with _hub_errors(repo, revision):
        commit = resolve(api, repo, revision, settings.allow_moving_revision)
    log.info("%s", fields(event="fetch.resolved", repo=repo, revision=revision, commit=commit,
                          endpoint=constants.ENDPOINT))
    directory = _found(cache, repo, commit, candidates)
    downloaded = False
    if directory is not None:
        log.info("%s", fields(event="fetch.cached", repo=repo, commit=commit,
                              directory=directory, downloaded=False,
                              reason="already in the cache, verified when it was fetched"))
    try:
        if directory is None:
            directory, downloaded = _fetch_locked(settings, cache, api, commit, files, ignore,
                                                  candidates)
        if settings.link is not None:
            point_link(settings.link, directory)
    except OSError as error:  # what _download did not translate: the lock, the link
        raise _unwritable(settings.cache, error) from None
    source = model_source.read(directory)
    return Fetched(repo=repo, revision=revision, commit=commit, directory=directory,
                   downloaded=downloaded, files=len(source.files),
                   bytes=sum((directory / path).stat().st_size for path in source.files))


def _fetch_locked(settings: FetchSettings, cache: Cache, api: HfApi, commit: str, files: str,
                  ignore: tuple[str, ...], candidates: list[str]) -> tuple[Path, bool]:
    """Under the key's lock: the directory another process just fetched, or our download;
    and whether we downloaded."""
    repo = settings.repo
    key = cache.key(repo, commit, files)
    lock = cache.lock(key)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log.info("%s", fields(event="fetch.waiting", repo=repo, commit=commit,
                              lock=lock.lock_file,
                              reason="another process is fetching the same files"))
        try:
            lock.acquire(timeout=settings.lock_timeout)
        except filelock.Timeout:
            raise FetchError(f"another process held the lock {lock.lock_file} for more than "
                             f"{settings.lock_timeout:g} s (--lock-timeout); if none is "
                             "fetching, remove the file") from None
    try:
        found = _found(cache, repo, commit, candidates)
        if found is not None:
            log.info("%s", fields(event="fetch.cached", repo=repo, commit=commit,
                                  directory=found, downloaded=False,
                                  reason="another process fetched it while this one waited"))
            return found, False
        return _download(settings, cache, api, commit, key,
                         cache.model_dir(repo, commit, files), ignore), True
    finally:
        lock.release()


def _download(settings: FetchSettings, cache: Cache, api: HfApi, commit: str, key: str,
              final: Path, ignore: tuple[str, ...]) -> Path:
    """List, check, download, verify, record, install (hold the key's lock)."""
    repo, revision = settings.repo, settings.revision
    with _hub_errors(repo, revision):
        listing = [entry for entry in api.list_repo_tree(repo, revision=commit, recursive=True)
                   if isinstance(entry, RepoFile)]
    selected = set(filter_repo_objects([entry.path for entry in listing],
                                       allow_patterns=list(settings.allow_patterns),
                                       ignore_patterns=list(ignore) or None))
    wanted = [entry for entry in listing if entry.path in selected]
    _servable(wanted, repo, commit, settings.skip_weights)
    total = sum(entry.size for entry in wanted)
    if settings.max_bytes is not None and total > settings.max_bytes:
        raise FetchError(f"{repo} at commit {commit} is {total} bytes ({len(wanted)} files), "
                         f"more than the cache's limit of {settings.max_bytes} bytes "
                         "(--max-bytes; on Kubernetes spec.model.huggingFace.cache.sizeLimit): "
                         "raise the limit, or use a PVC as the cache")
    if total > shutil.disk_usage(cache.root).free:
        raise _no_room(cache.root, total, during=False)
    staged = cache.staging(key, repo)
    try:
        log.info("%s", fields(event="fetch.download", repo=repo, commit=commit,
                              files=len(wanted), bytes_total=total))
        began = time.perf_counter()
        with _progress(staged, total, settings.progress_interval, repo), \
                _hub_errors(repo, revision):
            snapshot_download(repo, revision=commit, local_dir=staged,
                              allow_patterns=list(settings.allow_patterns),
                              ignore_patterns=list(ignore) or None)
        shutil.rmtree(staged / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping
        log.info("%s", fields(event="fetch.verify", repo=repo, files=len(wanted),
                              download_seconds=time.perf_counter() - began))
        digests = verify(staged, wanted)
        model_source.write(staged, model_source.ModelSource(
            repo=repo, revision=revision, commit=commit, endpoint=constants.ENDPOINT,
            files=digests))
        cache.install(staged, final)
    except OSError as error:
        if error.errno in _NO_ROOM:
            raise _no_room(staged.parent.parent, total, during=True) from None
        raise _unwritable(cache.root, error) from None
    finally:
        cache.discard(staged)  # nothing once installed; else whatever the failure left
    return final
