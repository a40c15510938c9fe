"""Read the tensors of a Hugging Face checkpoint: one `model.safetensors` or shards listed
in `model.safetensors.index.json`, straight onto the target device and dtype.

This module owns file discovery, name lookup with the optional head prefix ("bert.",
"roberta.", "distilbert.", "model.") and the "missing tensors" error. It knows nothing about
architectures.
"""

import json
from pathlib import Path
from typing import Iterable

import torch
from safetensors import SafetensorError, safe_open

from hedgerow.errors import ModelLoadError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
HEAD_PREFIXES = ("", "bert.", "roberta.", "distilbert.", "model.")


class Checkpoint:
    """Tensor names of a model directory, resolved to files; tensors load on demand.

    `progress` (a tqdm bar, or None) counts the tensors read out of those `require` named."""

    def __init__(self, directory: Path, device: torch.device, dtype: torch.dtype) -> None:
        self.directory, self.device, self.dtype = directory, device, dtype
        self._file_of = self._index(directory)
        self._handles: dict[Path, object] = {}
        self.prefix = ""
        self.progress = None

    @property
    def tensor_count(self) -> int:
        """Tensors in the files (heads included: `require` narrows the bar to those read)."""
        return len(self._file_of)

    @staticmethod
    def _index(directory: Path) -> dict[str, Path]:
        index = directory / INDEX_FILE
        single = directory / SINGLE_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text()).get("weight_map")
            except (ValueError, AttributeError) as error:  # not JSON, or not an object
                raise ModelLoadError(f"{index} is not a valid safetensors index: {error}") from None
            if not isinstance(weight_map, dict) or not all(
                    isinstance(shard, str) for shard in weight_map.values()):
                raise ModelLoadError(f"{index} is not a valid safetensors index: it needs a "
                                     f"\"weight_map\" object of tensor name -> shard file name")
            files = {name: directory / shard for name, shard in weight_map.items()}
            absent = sorted({str(f.name) for f in files.values() if not f.is_file()})
            if absent:
                raise ModelLoadError(f"{index} lists shards that are missing: {', '.join(absent)}")
            return files
        if single.is_file():
            with _open(single, "cpu") as handle:
                return {name: single for name in handle.keys()}
        others = sorted(p.name for p in directory.glob("*.bin")) + sorted(
            p.name for p in directory.glob("*.pt"))
        hint = f" (found {', '.join(others)}: only safetensors are read)" if others else ""
        raise ModelLoadError(
            f"no weights in {directory}: expected {SINGLE_FILE} or {INDEX_FILE}{hint}"
        )

    def use_prefix_of(self, anchor: str) -> None:
        """Pick the head prefix under which `anchor` (e.g. "embed_tokens.weight") exists."""
        for prefix in HEAD_PREFIXES:
            if prefix + anchor in self._file_of:
                self.prefix = prefix
                return
        raise ModelLoadError(
            f"missing tensor {anchor!r} in {self.directory} (also looked under the prefixes "
            f"{', '.join(repr(p) for p in HEAD_PREFIXES if p)})"
        )

    def require(self, names: Iterable[str], prefixed: bool = True) -> None:
        """Raise one ModelLoadError listing every name (without prefix, unless `prefixed` is
        false: a head's full names) that is absent."""
        names = list(names)
        prefix = self.prefix if prefixed else ""
        missing = [n for n in names if prefix + n not in self._file_of]
        if missing:
            shown = ", ".join(missing[:8])
            if len(missing) > 8:
                shown += f" and {len(missing) - 8} more"
            raise ModelLoadError(f"missing tensors in {self.directory}: {shown}")
        if self.progress is not None and prefixed:
            self.progress.reset(total=len(names))

    def has(self, name: str, prefixed: bool = True) -> bool:
        return (self.prefix + name if prefixed else name) in self._file_of

    def _handle(self, name: str, prefixed: bool) -> tuple[str, Path, object]:
        """(full name, its file, the file's open handle) of tensor `name`."""
        full = self.prefix + name if prefixed else name
        if full not in self._file_of:
            raise ModelLoadError(f"missing tensor {full!r} in {self.directory}")
        path = self._file_of[full]
        handle = self._handles.get(path)
        if handle is None:
            handle = _open(path, str(self.device))
            self._handles[path] = handle
        return full, path, handle

    def get(self, name: str, prefixed: bool = True) -> torch.Tensor:
        """The tensor `prefix + name` (`name` itself when not `prefixed`), on the target
        device, in the target dtype."""
        full, path, handle = self._handle(name, prefixed)
        try:
            tensor = handle.get_tensor(full)
        except SafetensorError as error:
            raise ModelLoadError(f"cannot read tensor {full!r} from {path}: {error}") from None
        if self.progress is not None:
            self.progress.update()
        return tensor.to(self.dtype)

    def rows(self, name: str, indices: Iterable[int], prefixed: bool = True) -> torch.Tensor:
        """Rows `indices` of the matrix `name` as one [len(indices), ...] tensor on the target
        device, in the target dtype: only those rows are read (an LM head's two answer rows,
        not its whole vocabulary)."""
        full, path, handle = self._handle(name, prefixed)
        try:
            matrix = handle.get_slice(full)
            tensor = torch.cat([matrix[i:i + 1] for i in indices])
        except SafetensorError as error:
            raise ModelLoadError(f"cannot read tensor {full!r} from {path}: {error}") from None
        return tensor.to(self.device, self.dtype)

    def close(self) -> None:
        self._handles.clear()


def weight_files(directory: Path) -> list[Path]:
    """The files the weights are read from (the index and its shards, or the one file), in
    name order; ModelLoadError as for loading when there are none."""
    files = set(Checkpoint._index(directory).values())
    index = directory / INDEX_FILE
    if index.is_file():
        files.add(index)
    return sorted(files)


def _open(path: Path, device: str):
    """safe_open(path) on `device`; a truncated or corrupt file is a ModelLoadError."""
    try:
        return safe_open(str(path), framework="pt", device=device)
    except (SafetensorError, OSError) as error:
        raise ModelLoadError(f"cannot read {path}: {error}") from None
