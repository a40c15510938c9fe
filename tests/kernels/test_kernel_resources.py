"""tools/kernel_resources.py compiles the resident kernel for Hopper (sm_90) on this CPU-only
machine, both variants (tensor descriptors and pointers), with its launch's real arguments: a
kernel change that Triton cannot compile for the GPU fails here, before any GPU runs it. What it
reports (registers, spilled stack bytes) depends on the Triton version and is not asserted."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

TOOL = Path(__file__).resolve().parents[2] / "tools" / "kernel_resources.py"


def test_every_variant_compiles_for_sm90(subprocess_env):
    result = subprocess.run([sys.executable, "-P", str(TOOL)], capture_output=True, text=True,
                            env=subprocess_env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()
            if line.startswith(("descriptors ", "pointers "))]
    assert [row[0] for row in rows] == ["descriptors", "pointers"]
    for _, registers, stack, shared in rows:
        assert 0 < int(registers) <= 255 and int(stack) >= 0 and int(shared) > 0


def test_sides_that_do_not_fit_are_refused(subprocess_env):
    result = subprocess.run([sys.executable, "-P", str(TOOL), "--hidden", "100"],
                            capture_output=True, text=True, env=subprocess_env, timeout=120)
    assert result.returncode == 2
    assert "do not fit the kernel's tiles" in result.stderr
