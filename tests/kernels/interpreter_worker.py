"""Runs the Triton top-k kernel in the CPU interpreter and checks it against the reference.

Started by test_topk_interpreter.py as `python -P interpreter_worker.py` with TRITON_INTERPRET=1.
It must be a fresh process: Triton decides interpreted-or-compiled for every @triton.jit function
(its own tl.topk included) when triton is first imported, and a pytest process may have imported
triton earlier without the variable. Prints one JSON line per check:
{"name": ..., "ok": bool, "detail": str}.
"""

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") != "1":
    sys.exit("interpreter_worker.py needs TRITON_INTERPRET=1 in its environment")

import torch  # noqa: E402

from hedgerow.kernels import topk_triton  # noqa: E402
from hedgerow.kernels.topk_reference import merge_topk, order_keys, topk_reference  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernel_cases", Path(__file__).with_name("conftest.py"))
cases = importlib.util.module_from_spec(_spec)
sys.modules["kernel_cases"] = cases  # dataclasses look their module up while the class is made
_spec.loader.exec_module(cases)


def assert_same(got, want):
    assert torch.equal(got[0], want[0]), f"indices differ:\n{got[0]}\n{want[0]}"
    # compare value bits, so -0/+0 and the padding's -inf must match exactly
    got_bits, want_bits = got[1].float().view(torch.int32), want[1].float().view(torch.int32)
    assert torch.equal(got_bits, want_bits), f"values differ:\n{got[1]}\n{want[1]}"
    assert got[1].dtype == want[1].dtype


def survivors(keys: torch.Tensor, k: int, lanes: int, method: str) -> int:
    """How many columns of one row pass a threshold method's filter (more than CAP: fallback).

    threshold64 keeps keys >= t over the keys; threshold32 counts columns whose 32-bit score
    bits are above t (those tied at t go to separate slots and never force the fallback).
    """
    values = keys if method == "threshold64" else keys >> 32
    cols = values.shape[0]
    padded = torch.cat([values, values.new_full(((-cols) % lanes,), values.min().item() - 1)])
    lane_max = padded.view(-1, lanes).max(dim=0).values
    t = lane_max.sort(descending=True).values[k - 1]
    return int((values >= t).sum() if method == "threshold64" else (values > t).sum())


def check_case(case):
    scores, k, valid, forced = cases.build_case(case)
    assert_same(topk_triton.topk_triton(scores, k, valid, forced),
                topk_reference(scores, k, valid, forced))


def check_other_methods():
    for method in ("threshold32", "bitonic"):
        for cols in (7, 130, 1000, 2100):
            for k in (1, 16, 33):
                g = torch.Generator().manual_seed(cols + k)
                scores = torch.randint(0, 5, (2, cols), generator=g).to(torch.float16)
                scores[1] = torch.randn(cols, generator=g)
                config = topk_triton.choose_config(cols, k, method=method)
                assert_same(topk_triton.topk_triton(scores, k, config=config),
                            topk_reference(scores, k))


def check_periodic_fallback():
    # the best values all sit in one lane (78 of them), so more than CAP keys pass the threshold
    cols, k = 5000, 16
    col = torch.arange(cols)
    scores = torch.where(col % 64 == 5, 10.0 + col / cols, col / cols)[None, :]
    for method in ("threshold64", "threshold32"):
        config = topk_triton.choose_config(cols, k, method)
        assert survivors(order_keys(scores)[0], k, config.lanes, method) > config.cap
        assert_same(topk_triton.topk_triton(scores, k, config=config), topk_reference(scores, k))


def check_random_takes_threshold_path():
    cols, k = 5003, 16
    scores = torch.randn(1, cols, generator=torch.Generator().manual_seed(9))
    for method in ("threshold64", "threshold32"):
        config = topk_triton.choose_config(cols, k, method)
        assert survivors(order_keys(scores)[0], k, config.lanes, method) <= config.cap
        assert_same(topk_triton.topk_triton(scores, k, config=config), topk_reference(scores, k))


def check_split_merge():
    g = torch.Generator().manual_seed(11)
    scores = torch.randint(0, 6, (2, 900), generator=g).to(torch.bfloat16)
    whole = topk_reference(scores, 16)
    parts_i, parts_v = [], []
    for a, b in [(0, 1), (1, 250), (250, 251), (251, 900)]:
        i, v = topk_triton.topk_triton(scores[:, a:b].contiguous(), 16)
        parts_i.append(torch.where(i >= 0, i + a, -1))
        parts_v.append(v)
    assert_same(merge_topk(torch.cat(parts_i, 1), torch.cat(parts_v, 1), 16), whole)


def check_valid_lengths_are_clamped():
    scores = torch.randn(1, 300, generator=torch.Generator().manual_seed(12)).repeat(4, 1)
    valid = torch.tensor([2**40, -5, 7, 2**31 + 3])  # int64 past int32: clamped, not wrapped
    want = topk_reference(scores, 16, valid)
    assert want[0][1].tolist() == [-1] * 16 and torch.equal(want[0][0], want[0][3])
    assert_same(topk_triton.topk_triton(scores, 16, valid), want)
    small = torch.tensor([400, -5, 7, 0], dtype=torch.int32)
    assert_same(topk_triton.topk_triton(scores, 16, small), topk_reference(scores, 16, small))


EXTRA_CHECKS = {
    "threshold32_and_bitonic_methods": check_other_methods,
    "periodic_rows_take_the_fallback": check_periodic_fallback,
    "random_rows_take_the_threshold_path": check_random_takes_threshold_path,
    "split_then_merge_on_the_kernel": check_split_merge,
    "valid_lengths_are_clamped": check_valid_lengths_are_clamped,
}


def main() -> int:
    interpreted = type(topk_triton._topk_kernel).__name__ == "InterpretedFunction"
    print(json.dumps({"name": "interpreted", "ok": interpreted, "detail": ""}), flush=True)
    checks = [(c.id, lambda c=c: check_case(c)) for c in cases.ci_cases()]
    checks += list(EXTRA_CHECKS.items())
    for name, check in checks:
        try:
            check()
            result = {"name": name, "ok": True, "detail": ""}
        except Exception:  # reported to the parent test, which fails with this traceback
            result = {"name": name, "ok": False, "detail": traceback.format_exc()}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
