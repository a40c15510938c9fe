"""Where a batch-1 step's time goes beyond the graph replay: the host's part of `step()`.

    python -P benchmarks/step_host_gpu.py [--models DIR] [--only bge-m3] [--tokens 128]

Runs on a CUDA machine; the numbers in docs/benchmarks.md are one H200. Loads the engine as
served (compiled, the GELU epilogue, one captured graph for 1 x TOKENS), then times, as the
median of 300 calls each after a device synchronize, every piece `CudaStepper.step` does on the
host (packing the batch, launching the input copy, the replay and the copy back), the whole
`step()`, and `step()` with its wait for the result, against the replay alone (CUDA events) and
the replay with its wait. The GPU sits idle until the replay is launched, so what comes before
the launch is on a batch's latency path. Also the candidates for the input's host buffer: a
fresh pinned one each step (today), or one reused every step, pinned or pageable, alone and as
the device path without step()'s Python (pack, copy, replay, copy back, wait; each result
checked against step()'s). Prints a table.
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

    # Candidates for the input's host buffer: today's fresh pinned one each step, or one buffer
    # reused every step. Pageable: CUDA stages the copy before the launch returns, so the buffer
    # is free again at once. Pinned: free only once the queued copy has run, so the engine would
    # need a guard that this benchmark, waiting each time, does not.
    reused = {"pinned": torch.empty(packed.numel(), dtype=torch.int32, pin_memory=True),
              "pageable": torch.empty(packed.numel(), dtype=torch.int32)}

    def device_path(buffer=None):
        """What step() does on the device path, without its Python: pack, copy, replay,
        copy back, wait."""
        image = pack_bucket(batch, config, stepper.pooling, out=buffer)
        with torch.cuda.stream(stepper.stream):
            static.packed.copy_(image, non_blocking=True)
            static.graph.replay()
        return LazyTensor.copy_from_device(static.output[:1], stepper.stream).synchronize()

    rows = []
    with torch.inference_mode():
        rows.append(("pack_bucket (pinned buffer, numpy)",
                     median_us(lambda: pack_bucket(batch, config, stepper.pooling))))
        for kind, buffer in reused.items():
            rows.append((f"pack_bucket into one reused {kind} buffer", median_us(
                lambda buffer=buffer: pack_bucket(batch, config, stepper.pooling, out=buffer))))
        rows.append(("launch the input copy", median_us(input_copy)))
        for kind, buffer in reused.items():
            image = pack_bucket(batch, config, stepper.pooling, out=buffer)

            def copy_from(image=image):
                with torch.cuda.stream(stepper.stream):
                    static.packed.copy_(image, non_blocking=True)
            rows.append((f"launch the input copy from the {kind} one", median_us(copy_from)))
        rows.append(("launch the replay", median_us(replay)))
        rows.append(("launch the copy back (LazyTensor)", median_us(
            lambda: LazyTensor.copy_from_device(static.output[:1], stepper.stream))))
    rows.append(("Engine.step() on the host", median_us(lambda: engine.step(batch))))
    rows.append(("Engine.step() and its wait", median_us(
        lambda: engine.step(batch).synchronize())))
    rows.append(("replay launch and its wait", median_us(replay_and_wait)))
    expected = engine.step(batch).synchronize().clone()
    with torch.inference_mode():
        rows.append(("device path, fresh pinned buffer", median_us(device_path)))
        for kind, buffer in reused.items():
            if not torch.equal(device_path(buffer), expected):
                raise SystemExit(f"the {kind} buffer's result differs from step()'s")
            rows.append((f"device path, reused {kind} buffer", median_us(
                lambda buffer=buffer: device_path(buffer))))
    rows.append(("replay on the device (events)", replay_device_us(stepper.stream, static.graph)))
    print(f"{torch.cuda.get_device_name()}, {args.only}, 1 x {args.tokens}, median µs")
    for name, value in rows:
        print(f"{name:40s} {value:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
