"""Where a fetched model directory came from: the record `hedgerow fetch-model` leaves in it.

A directory fetched from a Hugging Face hub holds SOURCE_FILE: the repository, the revision
asked for, the commit it resolved to, the hub's address and each file's verified digest. It
is written last, before the directory is renamed into place, so a directory that has one was
verified whole. The server puts `repo@commit` into its embedding space's facts (a changed
revision is a changed space); a directory without the file (a model baked into an image, a
PVC filled by hand) keeps the facts it always had. Plain data; torch-free.
"""

import dataclasses
import json
from pathlib import Path

from hedgerow.errors import ModelLoadError

SOURCE_FILE = "hedgerow-source.json"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    repo: str
    revision: str
    commit: str
    endpoint: str
    files: dict[str, str]  # path in the repository -> "sha256:<hex>" or "git-sha1:<hex>"

    @property
    def label(self) -> str:
        """`repo@commit`: what the embedding space's facts record."""
        return f"{self.repo}@{self.commit}"


def write(directory: Path, source: ModelSource) -> None:
    (directory / SOURCE_FILE).write_text(
        json.dumps(dataclasses.asdict(source), indent=1, sort_keys=True) + "\n",
        encoding="utf-8")


def read(directory: Path) -> ModelSource | None:
    """The directory's source record, None without one; a ModelLoadError names a bad one."""
    path = directory / SOURCE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        source = ModelSource(**{field.name: data[field.name]
                                for field in dataclasses.fields(ModelSource)})
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ModelLoadError(f"{path} is not a fetch record `hedgerow fetch-model` wrote "
                             f"({type(error).__name__}: {error}): fetch the model again") from None
    if not all(isinstance(getattr(source, f), str) for f in ("repo", "revision", "commit")):
        raise ModelLoadError(f"{path}: repo, revision and commit must be strings")
    return source
