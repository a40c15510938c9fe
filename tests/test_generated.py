"""What `make generate` writes from the settings dataclasses is committed as it writes it today:
the chart's CRD and the settings and spec-field tables in docs/."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_generator():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "tools" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = load_generator()


@pytest.mark.parametrize("path", sorted(GENERATOR.artifacts()), ids=lambda p: p.name)
def test_committed_copy_is_current(path):
    assert path.read_text() == GENERATOR.artifacts()[path], (
        f"{path.relative_to(ROOT)} is stale: run `make generate` and commit the result")


def test_a_table_without_its_markers_is_named(tmp_path):
    with pytest.raises(SystemExit, match="docs/x.md has no <!-- generated:t -->"):
        GENERATOR.with_table("no markers here\n", "t", "| a |\n", "docs/x.md")
    text = "a\n<!-- generated:t -->\nold\n<!-- end generated:t -->\nb\n"
    assert GENERATOR.with_table(text, "t", "new\n", "x") == \
        "a\n<!-- generated:t -->\nnew\n<!-- end generated:t -->\nb\n"
