"""The Triton kernel against the reference, bit for bit, in the CPU interpreter (the CI subset).

Triton decides interpreted-or-compiled for every @triton.jit function when triton is first
imported, so the kernel runs in a fresh child process started with TRITON_INTERPRET=1
(interpreter_worker.py), once for the module; each case below checks that child's verdict.
On a machine with CUDA the module is skipped: test_topk_gpu.py runs the compiled kernel there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("CUDA present: the compiled kernel is tested by test_topk_gpu.py",
                allow_module_level=True)
pytest.importorskip("triton")

WORKER = Path(__file__).with_name("interpreter_worker.py")
EXTRA_CHECKS = (
    "threshold32_and_bitonic_methods",
    "periodic_rows_take_the_fallback",
    "random_rows_take_the_threshold_path",
    "split_then_merge_on_the_kernel",
    "valid_lengths_are_clamped",
)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-P", str(WORKER)], env=env, capture_output=True,
                          text=True, timeout=540)
    assert done.returncode == 0, f"worker failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    results = {}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        results[record["name"]] = record
    assert results.get("interpreted", {}).get("ok"), "the kernel did not run interpreted"
    return results


def verdict(verdicts, name):
    assert name in verdicts, f"the worker did not report {name}"
    assert verdicts[name]["ok"], verdicts[name]["detail"]


def test_kernel_matches_reference(ci_case, verdicts):
    verdict(verdicts, ci_case.id)


@pytest.mark.parametrize("name", EXTRA_CHECKS)
def test_kernel_property(name, verdicts):
    verdict(verdicts, name)
