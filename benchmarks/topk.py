"""Benchmark: the Triton top-k (each launch configuration) against torch.topk on CUDA.

Run on a CUDA machine: `python -P benchmarks/topk.py [--rows 1,16,...] [--cols 672,...]`.
Each variant is captured in a CUDA graph of REPEAT back-to-back calls, so Python launch overhead
is not measured (serving replays graphs); the time is the median over replays, divided by
REPEAT, from CUDA events. Scores are float32 normal samples, k = 16. torch.topk is not
tie-exact in Hedgerow's order; it is the speed to beat, not a correctness peer.
"""

import argparse
import statistics
import sys

import torch

from hedgerow.bench.processes import at_least, int_list
from hedgerow.kernels.topk import topk
from hedgerow.kernels.topk_triton import choose_config, topk_triton

REPEAT = 10
REPLAYS = 15
VARIANTS = {
    # name -> (method, max_block, num_warps)
    "t32/1024": ("threshold32", 1024, None),
    "t32/4096": ("threshold32", 4096, None),
    "t64/1024": ("threshold64", 1024, None),
    "t64/4096": ("threshold64", 4096, None),
    "bit/1024": ("bitonic", 1024, None),
}


def time_graph(fn) -> float:
    """Median microseconds per call of fn, replayed from a CUDA graph."""
    fn()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPEAT):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / REPEAT)
    del graph
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int_list(1), default="1,4,16,64,256,1024,4096")
    parser.add_argument("--cols", type=int_list(1), default="672,1344,2048,4096,8192")
    parser.add_argument("--k", type=at_least(1), default=16)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated subset of " + ", ".join(VARIANTS))
    args = parser.parse_args(argv)
    chosen = args.variants.split(",")
    unknown = set(chosen) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.k > min(args.cols):
        parser.error(f"--k {args.k} is more than the narrowest --cols {min(args.cols)}")
    if not torch.cuda.is_available():
        print("benchmarks/topk.py needs CUDA", file=sys.stderr)
        return 2
    k = args.k
    variants = {name: VARIANTS[name] for name in chosen}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, k={k}, float32, "
          f"microseconds per call (median of {REPLAYS} graph replays of {REPEAT} calls)")
    names = ["torch.topk", "topk()", *variants]
    print("| rows | cols | " + " | ".join(names) + " | best kernel | torch.topk / best |")
    print("|" + "---|" * (len(names) + 4))
    g = torch.Generator(device="cuda").manual_seed(0)
    for cols in args.cols:
        for rows in args.rows:
            scores = torch.randn(rows, cols, device="cuda", generator=g)
            results = {
                "torch.topk": time_graph(lambda: torch.topk(scores, k, dim=1)),
                "topk()": time_graph(lambda: topk(scores, k)),
            }
            for name, (method, max_block, warps) in variants.items():
                config = choose_config(cols, k, method, max_block, warps)
                results[name] = time_graph(lambda c=config: topk_triton(scores, k, config=c))
            best = min(["topk()", *variants], key=results.get)
            ratio = results["torch.topk"] / results[best]
            flag = " (torch.topk faster)" if ratio < 1 else ""
            cells = " | ".join(f"{results[n]:.1f}" for n in names)
            print(f"| {rows} | {cols} | {cells} | {best} | {ratio:.2f}x{flag} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
