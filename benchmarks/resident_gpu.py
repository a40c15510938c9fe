"""The engine with BERT-family layers at up to 128 tokens as one kernel launch
(engine/resident.py) against the engine as served, in one process, alternating rounds.

    python -P benchmarks/resident_gpu.py [--models DIR] [--only bge-m3] [--rounds 4] [--out DIR]

Runs on a CUDA GPU; the numbers in docs/benchmarks.md say which. Both engines compiled with
CUDA graphs (the defaults); random weights of the model's shape (benchmarks/models.py). First
the vectors: batches of 1 x 128, 1 x 7 and 3 sequences of 30 / 50 / 41 tokens through both,
smallest cosine between them. Then per round, each engine: `step()` to the embedding on the
host at 1 x 128 (p50 of 300 steps) and the graph's replay alone (CUDA events). Writes
OUT/resident_gpu.json and prints a table last.
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


def load(directory: Path, resident_layers: bool) -> Engine:
    settings = GpuSettings(graph_hot_set=("1x128",), compile=True)
    with mock.patch.object(resident, "RESIDENT_LAYERS", resident_layers):
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
    engines = {"served": load(directory, False), "resident": load(directory, True)}
    vocab = engines["served"].info.vocab_size
    cosines = {}
    for lengths in ([128], [7], [30, 50, 41]):
        batch = RaggedBatch.from_sequences(engine_gpu.random_sequences(lengths, vocab, 5))
        a, b = (engine.step(batch).synchronize() for engine in engines.values())
        cosine = torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).min()
        cosines["+".join(map(str, lengths))] = round(cosine.item(), 6)
    engine_gpu.log(f"smallest cosine between the engines: {cosines}")
    batch = RaggedBatch.from_sequences(engine_gpu.random_sequences([128], vocab, 128))
    rounds = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, engine in engines.items():
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
