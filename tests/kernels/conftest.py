"""Top-k test cases: score rows built to hit the order's corners, at odd sizes.

A case is a small frozen description (rows, cols, k, dtype, pattern, valid lengths, forced
columns, seed); `build_case` turns it into tensors, the same bits on every machine. Tests ask for
`ci_case` (the CPU interpreter subset) or `gpu_case` (the full matrix) and are parametrised by
`pytest_generate_tests` below. Also `run_interpreted`, which runs a kernel check in Triton's CPU
interpreter.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
PATTERNS = (
    "random",      # normal scores
    "equal",       # every column the same: the order is the column order
    "cutoff",      # 4 distinct values: long runs of ties across the k-th place
    "zeros",       # +0 and -0 mixed with a few +-1: -0 must tie with +0
    "specials",    # NaN, +-inf, +-FLT_MAX, denormals sprinkled over random scores
    "nan",         # all NaN but a few: NaN ranks as -inf, ties to the lower index
    "ascending",   # sorted up: the best columns are the last ones
    "descending",  # sorted down
    "periodic",    # the best values share one lane (column mod 64): the kernel's fallback
)
VALIDS = ("none", "mixed", "zero", "int32")
FORCED = ("none", "sparse", "dense", "with_inf")


@dataclass(frozen=True)
class Case:
    rows: int
    cols: int
    k: int
    dtype: str
    pattern: str
    valid: str = "none"
    forced: str = "none"
    seed: int = 0

    @property
    def id(self) -> str:
        return (f"{self.rows}x{self.cols}-k{self.k}-{self.dtype}-{self.pattern}"
                f"-v_{self.valid}-f_{self.forced}-s{self.seed}")


def _pattern(case: Case, g: torch.Generator) -> torch.Tensor:
    rows, cols = case.rows, case.cols
    col = torch.arange(cols, dtype=torch.float32).expand(rows, cols)
    p = case.pattern
    if p == "random":
        return torch.randn(rows, cols, generator=g)
    if p == "equal":
        return torch.full((rows, cols), 0.375)
    if p == "cutoff":
        return torch.randint(0, 4, (rows, cols), generator=g).float() * 0.5
    if p == "zeros":
        x = torch.where(torch.rand(rows, cols, generator=g) < 0.5, -0.0, 0.0)
        pick = torch.rand(rows, cols, generator=g)
        x = torch.where(pick < 0.03, 1.0, x)
        return torch.where(pick > 0.97, -1.0, x)
    if p == "specials":
        x = torch.randn(rows, cols, generator=g)
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0,
                              torch.finfo(torch.float32).max, -torch.finfo(torch.float32).max,
                              1e-40, -1e-40, 65504.0, 3.0e38])
        choice = torch.randint(0, len(table), (rows, cols), generator=g)
        return torch.where(torch.rand(rows, cols, generator=g) < 0.25, table[choice], x)
    if p == "nan":
        x = torch.full((rows, cols), float("nan"))
        return torch.where(torch.rand(rows, cols, generator=g) < 0.02, -5.0, x)
    if p == "ascending":
        return col / max(cols, 1)
    if p == "descending":
        return -col / max(cols, 1)
    if p == "periodic":
        noise = torch.rand(rows, cols, generator=g)
        return torch.where(col.long() % 64 == 5, 10.0 + noise, noise)
    raise ValueError(p)


def build_case(case: Case, device: str = "cpu"):
    """(scores [rows, cols] dtype, k, valid_lengths [rows] or None, forced [rows, cols] or None)."""
    g = torch.Generator().manual_seed(case.seed * 7919 + case.cols)
    scores = _pattern(case, g).to(DTYPES[case.dtype])
    rows, cols = case.rows, case.cols
    valid = None
    if case.valid in ("mixed", "int32"):
        valid = torch.randint(0, cols + 3, (rows,), generator=g)
        valid[0] = cols  # one full row
        if rows > 1:
            valid[1] = min(case.k - 1, cols)  # fewer candidates than k
        if rows > 2:
            valid[2] = 0
        if case.valid == "int32":
            valid = valid.to(torch.int32)
    elif case.valid == "zero":
        valid = torch.zeros(rows, dtype=torch.int64)
    forced = None
    if case.forced == "sparse":
        forced = torch.rand(rows, cols, generator=g) < 0.01
        forced[:, cols // 2] = True
    elif case.forced == "dense":
        forced = torch.rand(rows, cols, generator=g) < 0.5
    elif case.forced == "with_inf":
        forced = torch.rand(rows, cols, generator=g) < 0.02
        scores = torch.where(torch.rand(rows, cols, generator=g) < 0.02,
                             torch.tensor(float("inf"), dtype=scores.dtype), scores)
    on = lambda t: None if t is None else t.to(device)  # noqa: E731
    return on(scores), case.k, on(valid), on(forced)


CI_WIDTHS = (1, 7, 33, 130, 1000, 5003)


def ci_cases() -> list[Case]:
    """About 50 cases: every pattern, dtype, k class, valid and forced mode at CI_WIDTHS."""
    cases = []
    ks = (1, 5, 16, 17, 40)
    combos = itertools.cycle(itertools.product(DTYPES, VALIDS, FORCED))
    for i, (cols, pattern) in enumerate(itertools.product(CI_WIDTHS, PATTERNS)):
        if cols == 5003 and pattern not in ("random", "cutoff", "periodic", "specials"):
            continue
        dtype, valid, forced = next(combos)
        cases.append(Case(3, cols, ks[i % len(ks)], dtype, pattern, valid, forced, seed=i))
    return cases


GPU_WIDTHS = (1, 2, 7, 15, 16, 17, 31, 33, 63, 65, 100, 127, 129, 255, 257, 500, 513, 672,
              700, 1000, 1023, 1025, 1344, 2047, 2049, 3001, 4095, 4097, 5003, 8191, 12288)


def gpu_cases() -> list[Case]:
    """Several hundred cases: every width x pattern, cycling dtypes, k, valid and forced modes."""
    cases = []
    ks = (16, 1, 16, 5, 16, 17, 32, 33, 64, 16, 3)
    combos = itertools.cycle(itertools.product(DTYPES, VALIDS, FORCED))
    for i, (cols, pattern) in enumerate(itertools.product(GPU_WIDTHS, PATTERNS)):
        dtype, valid, forced = next(combos)
        rows = (1, 5, 37)[i % 3]
        cases.append(Case(rows, cols, ks[i % len(ks)], dtype, pattern, valid, forced, seed=i))
    return cases


def pytest_generate_tests(metafunc):
    for name, make in (("ci_case", ci_cases), ("gpu_case", gpu_cases)):
        if name in metafunc.fixturenames:
            cases = make()
            metafunc.parametrize(name, cases, ids=[c.id for c in cases])


@pytest.fixture
def make_case():
    """build_case, for tests (conftest modules are not importable under --import-mode=importlib)."""
    return build_case


def python_topk(scores, k, valid_lengths=None, forced=None):
    """An independent oracle: Python's sort over (rank value, column) tuples, row by row.

    Returns (indices list[list[int]], values list[list[float]]) with the same padding rules.
    """
    out_i, out_v = [], []
    rows, cols = scores.shape
    values = scores.float().tolist()
    for r in range(rows):
        n = cols if valid_lengths is None else max(0, min(cols, int(valid_lengths[r])))
        ranked = []
        for c in range(n):
            v = values[r][c]
            if forced is not None and bool(forced[r, c]):
                v = float("inf")
            elif v != v:
                v = float("-inf")
            elif v == 0:
                v = 0.0
            ranked.append((-v, c))
        ranked.sort()
        top = ranked[:k] + [(float("inf"), -1)] * max(0, k - len(ranked))
        out_i.append([c for _, c in top])
        out_v.append([-v if v != 0 else 0.0 for v, _ in top])
    return out_i, out_v


@pytest.fixture
def oracle():
    return python_topk


@pytest.fixture
def run_interpreted():
    """`run(code)`: run `code` in a fresh Python with TRITON_INTERPRET=1 (Triton decides
    interpreted-or-compiled when it is first imported) and return its stdout, failing with its
    stderr. Skips without triton, and with CUDA present, where the kernels' GPU tests run them
    compiled."""
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the compiled kernel is tested by the GPU test files")

    def run(code: str) -> str:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        done = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    return run
