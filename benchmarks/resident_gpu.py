"""The engine with BERT-family layers at up to 128 tokens as one kernel launch
(engine/resident.py), with its seven steps a layer and with the norms folded into the
products (FOLD), against the engine as served, in one process, alternating rounds.

    python -P benchmarks/resident_gpu.py [--models DIR] [--only bge-m3] [--rounds 4] [--out DIR]

Runs on a CUDA GPU; the numbers in docs/benchmarks.md say which. Every engine compiled with
CUDA graphs (the defaults); random weights of the model's shape (benchmarks/models.py). First
the vectors: batches of 1 x 128, 1 x 7 and 3 sequences of 30 / 50 / 41 tokens through each,
smallest cosine to the served engine's. Then per round, each engine: `step()` to the
embedding on the host at 1 x 128 (p50 of 300 steps) and the graph's replay alone (CUDA
events). Writes OUT/resident_gpu.json and prints a table last.
"""

import argparse
import json
from pathlib import Path
from unittest import mock

import torch

from hedgerow.bench import engine_gpu, models as shapes
from hedgerow.engine import Engine, resident
from hedgerow.engine.batch import RaggedBatch
from hedgerow.gpu_settings import GpuSettings
from hedgerow.kernels import resident_layers


# Each engine: whether it takes the resident layers, and the kernel's tiles it runs with (the
# kernel is fixed in each graph when captured, and an eager step reads TILES when it runs).
ENGINES = {"served": (False, {}), "resident": (True, {}),
           "folded": (True, {"FOLD": True})}  # the norms folded into the products


def tiles(name: str):
    return mock.patch.dict(resident_layers.TILES, ENGINES[name][1])


def load(directory: Path, name: str) -> Engine:
    settings = GpuSettings(graph_hot_set=("1x128",), compile=True)
    with mock.patch.object(resident, "RESIDENT_LAYERS", ENGINES[name][0]), tiles(name):
        engine = Engine.load(directory, device="cuda", dtype="bfloat16", gpu_settings=settings)
        engine.warmup()
    return engine


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
    engines = {name: load(directory, name) for name in ENGINES}
    vocab = engines["served"].info.vocab_size
    cosines = {}
    for lengths in ([128], [7], [30, 50, 41]):
        batch = RaggedBatch.from_sequences(engine_gpu.random_sequences(lengths, vocab, 5))
        vectors = {}
        for name, engine in engines.items():
            with tiles(name):
                vectors[name] = engine.step(batch).synchronize().float()
        for name in list(engines)[1:]:
            cosine = torch.nn.functional.cosine_similarity(vectors["served"], vectors[name],
                                                           dim=-1).min()
            cosines[f"{name} {'+'.join(map(str, lengths))}"] = round(cosine.item(), 6)
    engine_gpu.log(f"smallest cosine to the served engine: {cosines}")
    batch = RaggedBatch.from_sequences(engine_gpu.random_sequences([128], vocab, 128))
    rounds = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            with tiles(name):
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
