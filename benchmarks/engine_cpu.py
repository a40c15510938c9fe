"""CPU throughput: the Hedgerow engine against `SentenceTransformer.encode`, same corpus, one run.

    .venv/bin/python -P benchmarks/engine_cpu.py [--model DIR] [--repeats 3]

The corpus is deterministic: 512 texts of 3 to 200 words drawn from a fixed word list with a
fixed seed (about 54k real tokens with all-MiniLM-L6-v2's tokenizer). Both sides include
tokenization. sentence-transformers sorts by length and pads each batch of 32; Hedgerow packs
texts in input order into ragged batches on a token budget, with no padding at all. The table
reports real (non-padding) tokens per second, the best of `--repeats` runs after one warm-up
run each, and the ratio. A script, not a test: numbers depend on the machine and its load.
"""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from hedgerow.commands.embed import batches, encode_texts, load_tokenizer
from hedgerow.defaults import default_model_path
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine

WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which be this "
    "has or had not but their first one its new after who also they her two been other when "
    "there all into more during time can only years most some would about may over many such "
    "then between these them people under she world three both up where while however him "
    "made city out state than well through used later so part known year since early same "
    "being until war name around any each including like high university before school due "
    "because several called long based four member national following use against served "
    "second number five season own united music family area end series team found small main "
    "way large american could life received became group work set local form often without "
    "best population river did major hedgerow blackthorn hawthorn bramble meadow farmer "
    "winter spring autumn summer birds nest shelter soil wind field boundary centuries laid "
    "cut trim berry fox badger"
).split()


def corpus(count: int = 512, min_words: int = 3, max_words: int = 200, seed: int = 20261129) -> list[str]:
    """`count` texts of `min_words` to `max_words` words, the same on every run."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = rng.choices(WORDS, k=rng.randint(min_words, max_words))
        texts.append(" ".join(words).capitalize() + ".")
    return texts


def run_engine(engine: Engine, tokenizer, texts: list[str], max_batch_tokens: int) -> torch.Tensor:
    info = engine.info
    sequences = encode_texts(tokenizer, texts, "", info.max_tokens, info.vocab_size)
    rows = [engine.step(RaggedBatch.from_sequences(chunk)).synchronize()
            for chunk in batches(sequences, max_batch_tokens)]
    return torch.cat(rows)


def best_of(repeats: int, work) -> tuple[float, float]:
    """(best, median) wall seconds of `repeats` calls after one warm-up call."""
    work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model directory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch-tokens", type=int, default=8192)
    parser.add_argument("--st-batch-size", type=int, default=32)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--skip-st", action="store_true", help="time only the engine")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    directory = args.model or default_model_path()
    texts = corpus()
    engine = Engine.load(directory, dtype=args.dtype)
    tokenizer = load_tokenizer(Path(directory))
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    real_tokens = sum(lengths)
    print(f"corpus: {len(texts)} texts, {real_tokens} real tokens, lengths {min(lengths)}-"
          f"{max(lengths)}; torch {torch.__version__}, {torch.get_num_threads()} threads",
          file=sys.stderr)

    rows = []
    ours_best, ours_median = best_of(
        args.repeats, lambda: run_engine(engine, tokenizer, texts, args.max_batch_tokens))
    rows.append((f"hedgerow engine ({args.dtype}, {args.max_batch_tokens}-token batches)",
                 ours_best, ours_median))
    if not args.skip_st:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(directory), device="cpu")
        st_best, st_median = best_of(
            args.repeats, lambda: model.encode(texts, batch_size=args.st_batch_size))
        rows.append((f"sentence-transformers encode (fp32, batch {args.st_batch_size})",
                     st_best, st_median))

    print(f"| {'run':<58} | {'best s':>7} | {'median s':>8} | {'real tokens/s':>13} |")
    print(f"|{'-' * 60}|{'-' * 9}|{'-' * 10}|{'-' * 15}|")
    for name, best, median in rows:
        print(f"| {name:<58} | {best:7.3f} | {median:8.3f} | {real_tokens / best:13,.0f} |")
    if len(rows) == 2:
        print(f"\nratio (hedgerow / sentence-transformers, best runs): {rows[1][1] / rows[0][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
