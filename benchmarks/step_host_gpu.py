"""Where a batch-1 step's time goes beyond the graph replay: the host's part of `step()`.

    python -P benchmarks/step_host_gpu.py [--models DIR] [--only bge-m3] [--tokens 128]

Runs on a CUDA machine; the numbers in docs/benchmarks.md are one H200. Loads the engine as
served (compiled, the GELU epilogue, one captured graph for 1 x TOKENS), then times, as the
median of 300 calls each after a device synchronize, every piece `CudaStepper.step` does on the
host (packing the batch, launching the input copy, the replay and the copy back), the whole
`step()`, and `step()` with its wait for the result, against the replay alone (CUDA events) and
the replay with its wait. The GPU sits idle until the replay is launched, so what comes before
the launch is on a batch's latency path. Prints a table.
"""

import argparse
import statistics
import time
from pathlib import Path

import torch

from hedgerow.bench import engine_gpu
from hedgerow.bench import models as shapes
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.engine.gpu import pack_bucket
from hedgerow.engine.lazy import LazyTensor
from hedgerow.gpu_settings import GpuSettings


def median_us(fn, calls=300):
    spent = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        spent.append((time.perf_counter() - start) * 1e6)
    return statistics.median(spent)


def replay_device_us(stream, graph, calls=100):
    spent = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            graph.replay()
            end.record()
        end.synchronize()
        spent.append(start.elapsed_time(end) * 1e3)
    return statistics.median(spent)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("/tmp/hedgerow-bench-models"))
    parser.add_argument("--only", default="bge-m3", choices=engine_gpu.EMBEDDING_SHAPES)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    directory = args.models / args.only
    if not (directory / "config.json").is_file():
        shapes.write_model(args.only, directory)
    shape = f"1x{args.tokens}"
    engine = Engine.load(directory, device="cuda", dtype="bfloat16",
                         gpu_settings=GpuSettings(graph_hot_set=(shape,), compile=True))
    engine.warmup()
    stepper = engine._gpu
    generator = torch.Generator().manual_seed(0)
    batch = RaggedBatch.from_sequences(
        [torch.randint(3, 30000, (args.tokens,), generator=generator).tolist()])
    for _ in range(20):
        engine.step(batch).synchronize()
    config = stepper.cache.grid.config_for(1, args.tokens)
    static = stepper._static[config]
    packed = pack_bucket(batch, config, stepper.pooling)

    def input_copy():
        with torch.cuda.stream(stepper.stream):
            static.packed.copy_(packed, non_blocking=True)

    def replay():
        with torch.cuda.stream(stepper.stream):
            static.graph.replay()

    def replay_and_wait():
        replay()
        stepper.stream.synchronize()

    rows = []
    with torch.inference_mode():
        rows.append(("pack_bucket (pinned buffer, numpy)",
                     median_us(lambda: pack_bucket(batch, config, stepper.pooling))))
        rows.append(("launch the input copy", median_us(input_copy)))
        rows.append(("launch the replay", median_us(replay)))
        rows.append(("launch the copy back (LazyTensor)", median_us(
            lambda: LazyTensor.copy_from_device(static.output[:1], stepper.stream))))
    rows.append(("Engine.step() on the host", median_us(lambda: engine.step(batch))))
    rows.append(("Engine.step() and its wait", median_us(
        lambda: engine.step(batch).synchronize())))
    rows.append(("replay launch and its wait", median_us(replay_and_wait)))
    rows.append(("replay on the device (events)", replay_device_us(stepper.stream, static.graph)))
    print(f"{torch.cuda.get_device_name()}, {args.only}, 1 x {args.tokens}, median µs")
    for name, value in rows:
        print(f"{name:40s} {value:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
