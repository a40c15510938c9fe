"""The engine with BERT-family layers at up to 128 tokens as one kernel launch
(engine/resident.py) against the engine as served, in one process, alternating rounds; and
the kernel with each product's first weights loaded during the barrier before it (TILES'
PRELOAD).

    python -P benchmarks/resident_gpu.py [--models DIR] [--only bge-m3] [--rounds 4] [--out DIR]

Runs on a CUDA GPU; the numbers in docs/benchmarks.md say which. Every engine compiled with
CUDA graphs (the defaults); random weights of the model's shape (benchmarks/models.py). First
the vectors: batches of 1 x 128, 1 x 7 and 3 sequences of 30 / 50 / 41 tokens through each,
smallest cosine to the served engine's. Then per round, each engine: `step()` to the embedding
on the host at 1 x 128 (p50 of 300 steps) and the graph's replay alone (CUDA events). Writes
OUT/resident_gpu.json and prints a table last.
"""

import argparse
import contextlib
import json
from pathlib import Path
from unittest import mock

import torch

from hedgerow.bench import engine_gpu, models as shapes
from hedgerow.engine import Engine, resident
from hedgerow.engine.batch import RaggedBatch
from hedgerow.gpu_settings import GpuSettings
from hedgerow.kernels import resident_layers as resident_layers_kernel

# Each engine: the resident layers on or off, and the kernel's tiles changed from TILES.
ENGINES = {"served": (False, {}), "resident": (True, {}),
           "preload": (True, {"PRELOAD": True})}


def variant(resident_layers: bool, tiles: dict):
    """The context an engine is loaded, captured and run in."""
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(resident, "RESIDENT_LAYERS", resident_layers))
    stack.enter_context(mock.patch.dict(resident_layers_kernel.TILES, tiles))
    return stack


def load(directory: Path) -> dict:
    settings = GpuSettings(graph_hot_set=("1x128",), compile=True)
    engines = {}
    for name, setup in ENGINES.items():
        with variant(*setup):
            engine = Engine.load(directory, device="cuda", dtype="bfloat16",
                                 gpu_settings=settings)
            engine.warmup()
        engines[name] = engine
    return engines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=Path("/tmp/hedgerow-bench-models"))
    parser.add_argument("--only", default="bge-m3")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    directory = args.models / args.only
    if not (directory / "config.json").is_file():
        shapes.write_model(args.only, directory)
    engines = load(directory)
    vocab = engines["served"].info.vocab_size
    cosines = {name: {} for name in engines if name != "served"}
    for lengths in ([128], [7], [30, 50, 41]):
        batch = RaggedBatch.from_sequences(engine_gpu.random_sequences(lengths, vocab, 5))
        vectors = {}
        for name, engine in engines.items():
            with variant(*ENGINES[name]):
                vectors[name] = engine.step(batch).synchronize().float()
        for name in cosines:
            cosine = torch.nn.functional.cosine_similarity(vectors["served"], vectors[name],
                                                           dim=-1).min()
            cosines[name]["+".join(map(str, lengths))] = round(cosine.item(), 6)
    engine_gpu.log(f"smallest cosine to the served engine: {cosines}")
    batch = RaggedBatch.from_sequences(engine_gpu.random_sequences([128], vocab, 128))
    rounds = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            with variant(*ENGINES[name]):
                p50, _ = engine_gpu.time_engine(engine, batch, 300)
                _, replay_ms = engine_gpu.time_parts(engine, batch)
            rounds[name].append((round(p50 * 1e3, 1), round(replay_ms * 1e3, 1)))
    result = {"device": torch.cuda.get_device_name(), "model": args.only, "cosine": cosines,
              "step_and_wait_us_replay_us_by_round": rounds}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resident_gpu.json").write_text(json.dumps(result, indent=1))
    engine_gpu.log(f"\n{args.only} at 1 x 128, µs by round (step() + wait / replay):")
    for name, values in rounds.items():
        engine_gpu.log(f"  {name:9s} " + "   ".join(f"{s} / {r}" for s, r in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
