"""The images' scripts (images/*.py) and the image tooling (tools/containers/) as modules:
neither is part of the hedgerow package, so each is loaded from its file."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CONTAINERS = ROOT / "tools" / "containers"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def requirements_script() -> ModuleType:
    return load(ROOT / "images" / "requirements.py")


@pytest.fixture(scope="session")
def copy_model_script() -> ModuleType:
    return load(ROOT / "images" / "copy_default_model.py")


@pytest.fixture(scope="session")
def healthcheck_script() -> ModuleType:
    return load(ROOT / "images" / "healthcheck.py")


@pytest.fixture(scope="session")
def builder_module() -> ModuleType:
    # tools/containers/ modules import their siblings by name, as `python -P tools/containers`
    # runs them with that folder first on sys.path.
    if str(CONTAINERS) not in sys.path:
        sys.path.insert(0, str(CONTAINERS))
    return load(CONTAINERS / "builder.py")
