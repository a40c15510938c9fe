"""--compile-cache: torch.compile's caches go to the given directory, and a fresh process that
compiles the same graph there reuses the first one's work.

The server compiles only on CUDA; the reuse is shown here with Inductor's CPU backend on a
small function, in two real processes (the mechanism is the same: Inductor's FX graph cache
under the directory `compile_cache.use` names)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from hedgerow.engine import compile_cache
from hedgerow.errors import ConfigError
from tests.conftest import child_env

COMPILE_TWICE = """
import json, sys
from pathlib import Path
from hedgerow.engine import compile_cache
compile_cache.use(Path(sys.argv[1]))
import torch
from torch._dynamo.utils import counters
step = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w) * 2 + 1, dynamic=True)
step(torch.randn(5, 8), torch.randn(8, 4))
print(json.dumps(dict(counters["inductor"])))
"""


def test_use_points_inductor_triton_fa4_and_quack_under_the_directory(tmp_path, monkeypatch):
    for name in (compile_cache.INDUCTOR_ENV, compile_cache.TRITON_ENV,
                 compile_cache.FA4_CACHE_ON_ENV, compile_cache.FA4_CACHE_DIR_ENV,
                 compile_cache.QUACK_CACHE_DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    directory = tmp_path / "cache" / "compile"
    compile_cache.use(directory)
    assert directory.is_dir()
    assert os.environ[compile_cache.INDUCTOR_ENV] == str(directory / "inductor")
    assert os.environ[compile_cache.TRITON_ENV] == str(directory / "triton")
    assert os.environ[compile_cache.FA4_CACHE_ON_ENV] == "1"
    assert os.environ[compile_cache.FA4_CACHE_DIR_ENV] == str(directory / "flash-attn-cute")
    assert os.environ[compile_cache.QUACK_CACHE_DIR_ENV] == str(directory / "quack")


def test_a_directory_that_cannot_be_made_is_a_config_error(tmp_path, monkeypatch):
    for name in (compile_cache.INDUCTOR_ENV, compile_cache.TRITON_ENV):
        monkeypatch.delenv(name, raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"--compile-cache .*a-file/cache: cannot create it"):
        compile_cache.use(blocker / "cache")
    assert compile_cache.INDUCTOR_ENV not in os.environ


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="Inductor's CPU backend needs a C++ compiler")
def test_a_second_process_reuses_the_first_ones_compile(tmp_path):
    def compile_in_a_fresh_process() -> dict:
        done = subprocess.run([sys.executable, "-P", "-c", COMPILE_TWICE, str(tmp_path)],
                              env=child_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = compile_in_a_fresh_process()
    second = compile_in_a_fresh_process()
    assert first.get("fxgraph_cache_miss", 0) >= 1 and not first.get("fxgraph_cache_hit")
    assert second.get("fxgraph_cache_hit", 0) >= 1 and not second.get("fxgraph_cache_miss")
    assert any((tmp_path / "inductor").iterdir())
