"""The model cache's layout on disk: where a fetched model lives, its lock, its staging area.

Under the cache root:

    <org>--<name>/<commit>-<files>/<name>/   a model directory, complete and verified
    .incoming/<key>.<random>/<name>/         a download in progress (never served from)
    .locks/<key>.lock                        held by the one process fetching <key>

`<files>` is a digest of the allow and ignore patterns, so a different file set of one commit
gets a directory of its own instead of a directory missing files. The model directory is
named after the repository (what `hedgerow server` reports as the model's name). A download
is staged under `.incoming` on the same filesystem and renamed into place in one step once
verified (`install`), so a reader finds either nothing or the whole directory; whatever an
interrupted process left under `.incoming` is removed by the next holder of the key's lock.
The lock is a `filelock` lock file (flock(2), which NFS serves as POSIX locks across
clients), so pods sharing a ReadWriteMany volume download a model once. Knows nothing about
the hub.
"""

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

import filelock

INCOMING = ".incoming"
LOCKS = ".locks"


def files_digest(allow_patterns: tuple[str, ...], ignore_patterns: tuple[str, ...]) -> str:
    text = json.dumps({"allow": sorted(allow_patterns), "ignore": sorted(ignore_patterns)},
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class Cache:
    """One cache root and the names of what lives in it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(repo: str, commit: str, files: str) -> str:
        return f"{repo.replace('/', '--')}--{commit}-{files}"

    def model_dir(self, repo: str, commit: str, files: str) -> Path:
        """Where the model directory of `repo` at `commit` with file set `files` lives."""
        return self.root / repo.replace("/", "--") / f"{commit}-{files}" / repo.split("/")[-1]

    def lock(self, key: str) -> filelock.FileLock:
        (self.root / LOCKS).mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(self.root / LOCKS / f"{key}.lock")

    def staging(self, key: str, repo: str) -> Path:
        """A new, empty model directory to download into (hold the key's lock)."""
        for stale in (self.root / INCOMING).glob(f"{key}.*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a process that died
        directory = self.root / INCOMING / f"{key}.{secrets.token_hex(4)}" / repo.split("/")[-1]
        directory.mkdir(parents=True)
        return directory

    @staticmethod
    def discard(staged: Path) -> None:
        shutil.rmtree(staged.parent, ignore_errors=True)

    @staticmethod
    def install(staged: Path, final: Path) -> None:
        """Rename the staged model directory's parent into place: one step, so a reader never
        sees a partial model (hold the key's lock)."""
        final.parent.parent.mkdir(parents=True, exist_ok=True)
        if final.parent.exists():  # without a source record: a copy no fetch finished
            shutil.rmtree(final.parent)
        os.rename(staged.parent, final.parent)


def point_link(link: Path, target: Path) -> None:
    """Make `link` a symbolic link to `target`, replacing what is there in one step."""
    link.parent.mkdir(parents=True, exist_ok=True)
    temporary = link.with_name(f".{link.name}.{secrets.token_hex(4)}")
    temporary.symlink_to(target, target_is_directory=True)
    os.replace(temporary, link)
