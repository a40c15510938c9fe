"""What the resident kernel's compiled code holds per thread on Hopper, on a machine without a GPU.

Usage: .venv/bin/python -P tools/kernel_resources.py [--hidden 1024 --ff 4096 --heads 16]

For each variant (tensor descriptors or pointers), runs the kernel's own launch
(`bert_layers_triton`) on CPU tensors with the launch intercepted, gives its arguments the
types and alignment hints Triton's launcher would (a 16-byte-aligned pointer or an integer that
is a multiple of 16 is marked so, an integer equal to 1 becomes a constant), compiles for sm_90
with the installed Triton, and reads the cubin's resource usage with the `cuobjdump` Triton
ships. A stack above zero is registers spilled to local memory. Compiling without the
hints marks nothing aligned and gives scalar loads and spills the real kernel does not have.
"""

import argparse
import re
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.tools.tensor_descriptor import TensorDescriptor

from hedgerow.kernels import resident_layers_triton as kernel
from hedgerow.kernels.resident_layers import MAX_TOKENS, STACKED, tiles_for

TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
         torch.int32: "i32", torch.int64: "i64"}
LAUNCH_ONLY = ("num_warps", "num_stages", "launch_cooperative_grid")
PROGRAMS = 132  # an H100 SXM's SMs


class _Launch:
    """Stands in for the kernel: `kernel[grid](*args, **kwargs)` records the call."""

    def __init__(self, fn):
        self.fn, self.args, self.kwargs = fn, None, None

    def __getitem__(self, grid):
        def record(*args, **kwargs):
            self.args, self.kwargs = args, kwargs
        return record


def _signature(fn, args, kwargs):
    """(signature, constants, attrs) for ASTSource from one launch's arguments."""
    signature, constants, attrs = {}, {}, {}
    for index, (name, value) in enumerate(zip(fn.arg_names, args)):
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + TYPES[value.dtype]
            if value.data_ptr() % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, TensorDescriptor):
            block = ", ".join(str(side) for side in value.block_shape)
            signature[name] = f"tensordesc<{TYPES[value.base.dtype]}[{block}]>"
        elif isinstance(value, bool) or value == 1 and isinstance(value, int):
            signature[name], constants[name] = "constexpr", value
        elif isinstance(value, int):
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    for name, value in kwargs.items():
        if name not in LAUNCH_ONLY:
            signature[name], constants[name] = "constexpr", value
    return signature, constants, attrs


def resources(hidden: int, ff: int, heads: int, tma: bool) -> dict[str, int]:
    """The compiled kernel's registers and stack bytes per thread, and shared bytes per
    program, for one variant."""
    tiles = tiles_for(hidden, ff, heads) | dict(TMA=tma)
    x = torch.zeros(MAX_TOKENS, hidden, dtype=torch.bfloat16)
    shapes = dict(qkv_w=(3 * hidden, hidden), qkv_b=(3 * hidden,), o_w=(hidden, hidden),
                  up_w=(ff, hidden), up_b=(ff,), down_w=(hidden, ff))
    # Two layers: one would make the layer count a constant, which the engine's never is.
    w = {name: torch.zeros(2, *shapes.get(name, (hidden,)), dtype=torch.bfloat16)
         for name in STACKED}
    cu_seqlens = torch.tensor([0, MAX_TOKENS], dtype=torch.int32)
    launch = _Launch(kernel._bert_layers)
    with mock.patch.object(kernel, "_bert_layers", launch):
        kernel.bert_layers_triton(x, cu_seqlens, w, heads, 1e-5, tiles, PROGRAMS)
    signature, constants, attrs = _signature(launch.fn, launch.args, launch.kwargs)
    compiled = triton.compile(
        ASTSource(launch.fn, signature, constexprs=constants, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=launch.kwargs["num_warps"],
                     num_stages=launch.kwargs["num_stages"]))
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([str(tools / "cuobjdump"), "--dump-resource-usage", cubin.name],
                               capture_output=True, text=True, check=True).stdout
    found = dict(re.findall(r"\b(REG|STACK):(\d+)", usage.split("Function")[-1]))
    return {"registers": int(found["REG"]), "stack": int(found["STACK"]),
            "shared": compiled.metadata.shared}  # Triton's shared memory is dynamic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--ff", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    args = parser.parse_args()
    if min(args.hidden, args.ff, args.heads) < 1:
        parser.error("--hidden, --ff and --heads must be positive")
    if tiles_for(args.hidden, args.ff, args.heads) is None:
        parser.error("these sides do not fit the kernel's tiles (kernels/resident_layers.py)")
    print(f"Triton {triton.__version__}, sm_90, hidden {args.hidden}, intermediate {args.ff}, "
          f"{args.heads} heads")
    print(f"{'loads':<12} {'registers':>9} {'stack B':>7} {'shared B':>8}")
    for tma in (True, False):
        used = resources(args.hidden, args.ff, args.heads, tma)
        print(f"{'descriptors' if tma else 'pointers':<12} {used['registers']:>9} "
              f"{used['stack']:>7} {used['shared']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
