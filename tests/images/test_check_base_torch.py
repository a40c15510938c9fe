"""images/check_base_torch.py: the server image's build stops on a base whose torch cannot
run the engine's GPU attention, saying why."""

import subprocess
import sys
from pathlib import Path

from tests.conftest import child_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "images" / "check_base_torch.py"


def check(env_path: Path | None = None) -> subprocess.CompletedProcess:
    env = child_env()
    if env_path:
        env["PYTHONPATH"] = str(env_path)
    return subprocess.run([sys.executable, "-P", str(SCRIPT)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_this_torch_passes():
    result = check()
    assert result.returncode == 0, result.stderr
    assert "has torch.nn.attention.varlen" in result.stdout


def test_an_old_torch_is_refused_with_the_import_error(tmp_path):
    # A torch 2.5 stand-in: it imports, and has no nn.attention.varlen.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('__version__ = "2.5.1"\n')
    result = check(tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("TORCH_IMAGE's torch 2.5.1 lacks torch.nn.attention.varlen "
                                    "(No module named 'torch.nn'")
    assert "use torch 2.10 or later" in result.stderr


def test_no_torch_is_refused(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('raise ImportError("libcudart.so.13")\n')
    result = check(tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("TORCH_IMAGE has no torch that imports (libcudart.so.13)")
