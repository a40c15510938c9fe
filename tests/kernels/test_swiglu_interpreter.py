"""kernels/swiglu.py in Triton's CPU interpreter against its reference (the CI subset).

Triton decides interpreted-or-compiled when it is first imported, so the check runs in a fresh
child process with TRITON_INTERPRET=1. With CUDA present, test_swiglu_gpu.py runs the compiled
kernel instead.
"""


import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("CUDA present: the compiled kernel is tested by test_swiglu_gpu.py",
                allow_module_level=True)
pytest.importorskip("triton")

CHILD = """
import torch
from hedgerow.kernels.swiglu import swiglu_interleaved, swiglu_reference
specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 3e38, -3e38,
                         88.0, -88.0, 1.5, -2.5])
gate, up = torch.meshgrid(specials, specials, indexing="ij")
cases = [torch.stack((gate.flatten(), up.flatten()), dim=1).reshape(-1, 2)]
torch.manual_seed(0)
cases += [torch.randn(rows, width) * 4 for rows, width in ((1, 2), (3, 6), (7, 2050))]
cases.append(torch.randn(5, 10).to(torch.bfloat16))
for y in cases:
    torch.testing.assert_close(swiglu_interleaved(y), swiglu_reference(y), equal_nan=True)
print("ok", len(cases))
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 5"
