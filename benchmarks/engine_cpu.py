"""CPU throughput: the Hedgerow engine against `SentenceTransformer.encode`, same corpus, one run.

    .venv/bin/python -P benchmarks/engine_cpu.py [--model DIR] [--repeats 3] [--dtype auto]
    .venv/bin/python -P benchmarks/engine_cpu.py --attention-study   # CPU attention candidates

The corpus is deterministic: 512 texts of 3 to 200 words drawn from a fixed word list with a
fixed seed (about 54k real tokens with all-MiniLM-L6-v2's tokenizer). Both sides include
tokenization. sentence-transformers sorts by length and pads each batch of 32; Hedgerow packs
texts in input order into ragged batches on a token budget, with no padding at all. The table
reports real (non-padding) tokens per second, the best of `--repeats` interleaved rounds after
one warm-up run each, and the ratios. With `--dtype auto` (the default, as the server's) the
engine in the dtype auto chose is timed against the float32 engine in the same run. A script,
not a test: numbers depend on the machine and its load.
"""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hedgerow.bench.processes import at_least
from hedgerow.commands.embed import batches, encode_texts, load_tokenizer
from hedgerow.defaults import default_model_path
from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.kernels.ragged_attention import reference_attention

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


def corpus(count: int = 512, min_words: int = 3, max_words: int = 200,
           seed: int = 20261129) -> list[str]:
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


# --- CPU attention candidates: the study behind engine/attention.py's choice -------------------
# Each has the backend signature (q [T, Hq, D], k/v [T, Hkv, D], cu_seqlens, max_seqlen, causal)
# -> [T, Hq, D]; non-causal only (what the study times).

def block_diagonal(q, k, v, cu_seqlens, max_seqlen, causal):
    """One SDPA call over the whole token axis with a [T, T] block-diagonal mask."""
    seq = torch.repeat_interleave(torch.arange(cu_seqlens.numel() - 1),
                                  (cu_seqlens[1:] - cu_seqlens[:-1]).long())
    mask = seq[:, None] == seq[None, :]
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                       v.transpose(0, 1)[None], attn_mask=mask)
    return o[0].transpose(0, 1)


def _padded_groups(q, k, v, cu_seqlens, groups):
    """SDPA on each group of sequences padded to the group's longest, keys masked."""
    out = torch.empty_like(q)
    starts, lengths = cu_seqlens[:-1].long(), (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    for group in groups:
        st, ln = starts[group], lengths[group]
        longest = int(ln.max())
        offsets = torch.arange(longest)
        valid = offsets[None, :] < ln[:, None]                             # [n, L]
        rows = torch.minimum(st[:, None] + offsets, (st + ln - 1)[:, None]).reshape(-1)
        n = len(group)

        def gather(x: torch.Tensor) -> torch.Tensor:  # [n * L, H, D] rows -> [n, H, L, D]
            return x.index_select(0, rows).view(n, longest, *x.shape[1:]).transpose(1, 2)

        o = F.scaled_dot_product_attention(gather(q), gather(k), gather(v),
                                           attn_mask=valid[:, None, None, :])
        keep = valid.reshape(-1)
        out.index_copy_(0, rows[keep], o.transpose(1, 2).reshape(n * longest, *q.shape[1:])[keep])
    return out


def padded_batch(q, k, v, cu_seqlens, max_seqlen, causal):
    """Classic padding: the whole batch padded to its longest sequence, one SDPA call."""
    return _padded_groups(q, k, v, cu_seqlens, [list(range(cu_seqlens.numel() - 1))])


def sorted_groups(q, k, v, cu_seqlens, max_seqlen, causal, waste=0.15):
    """Sequences sorted by length, cut into groups padding at most `waste`, one SDPA each."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    groups, current = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if current and (len(current) + 1) * lengths[current[0]] > (1 + waste) * (
                sum(lengths[j] for j in current) + lengths[i]):
            groups.append(current)
            current = []
        current.append(i)
    groups.append(current)
    return _padded_groups(q, k, v, cu_seqlens, groups)


def per_sequence_sdpa_cat(q, k, v, cu_seqlens, max_seqlen, causal):
    """Per sequence SDPA (flash kernel) on strided views, outputs concatenated once."""
    bounds = cu_seqlens.tolist()
    return torch.cat([
        F.scaled_dot_product_attention(*(x[start:end].unsqueeze(0).transpose(1, 2)
                                         for x in (q, k, v)))[0].transpose(0, 1)
        for start, end in zip(bounds[:-1], bounds[1:])])


def per_sequence_sdpa_copy(q, k, v, cu_seqlens, max_seqlen, causal):
    """Per sequence SDPA on strided views, each output copied into a preallocated [T, H, D]."""
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        o = F.scaled_dot_product_attention(*(x[start:end].unsqueeze(0).transpose(1, 2)
                                             for x in (q, k, v)))
        out[start:end] = o[0].transpose(0, 1)
    return out


def per_sequence_matmul(q, k, v, cu_seqlens, max_seqlen, causal):
    """Per sequence: scores = q k^T / sqrt(D), softmax, times v (bmm, no fused kernel)."""
    out = torch.empty_like(q)
    scale = q.shape[-1] ** -0.5
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))
        weights = torch.bmm(qs * scale, ks.transpose(1, 2)).softmax(-1)
        out[start:end] = torch.bmm(weights, vs).transpose(0, 1)
    return out


ATTENTION_CANDIDATES = {
    "engine/attention.py (bmm <= 512 tokens, else SDPA)": CpuRaggedAttention(),
    "per-sequence SDPA, one cat": per_sequence_sdpa_cat,
    "per-sequence SDPA, copy into [T, H, D]": per_sequence_sdpa_copy,
    "per-sequence bmm-softmax-bmm": per_sequence_matmul,
    "length-sorted padded groups, SDPA each": sorted_groups,
    "whole batch padded, one SDPA": padded_batch,
    "block-diagonal [T, T] mask, one SDPA": block_diagonal,
}


def attention_study(engine: Engine, tokenizer, texts: list[str], max_batch_tokens: int,
                    repeats: int, batches_used: int) -> None:
    """Time each candidate on the corpus's own batches at the model's head shapes."""
    config = engine._loaded.config
    heads, kv_heads = config.num_heads, getattr(config, "num_kv_heads", config.num_heads)
    head_dim = config.head_dim
    info = engine.info
    sequences = encode_texts(tokenizer, texts, "", info.max_tokens, info.vocab_size)
    work = []
    generator = torch.Generator().manual_seed(0)
    for chunk in batches(sequences, max_batch_tokens)[:batches_used]:
        batch = RaggedBatch.from_sequences(chunk)
        qkv = torch.randn(batch.num_tokens, heads + 2 * kv_heads, head_dim, generator=generator)
        q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=1)
        work.append((q, k, v, batch.cu_seqlens, batch.max_seqlen))
    tokens = sum(w[0].shape[0] for w in work)
    expected = [reference_attention(*w, False) for w in work[:1]]
    print(f"attention study: {len(work)} batches, {tokens} tokens, {heads}/{kv_heads} heads of "
          f"{head_dim}, {torch.get_num_threads()} threads; time per layer over these batches")
    print(f"| {'candidate':<50} | {'best ms':>8} | {'median ms':>9} | {'max error':>9} |")
    print(f"|{'-' * 52}|{'-' * 10}|{'-' * 11}|{'-' * 11}|")
    for name, attention in ATTENTION_CANDIDATES.items():
        error = (attention(*work[0], False) - expected[0]).abs().max().item()
        best, median = best_of(repeats, lambda: [attention(*w, False) for w in work])
        print(f"| {name:<50} | {best * 1000:8.1f} | {median * 1000:9.1f} | {error:9.1e} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model directory")
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument("--max-batch-tokens", type=at_least(1), default=8192)
    parser.add_argument("--st-batch-size", type=at_least(1), default=32)
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                        help="the engine's dtype; auto (the server's default) is also timed "
                             "against float32 when it chooses something else")
    parser.add_argument("--threads", type=at_least(1), default=None,
                        help="torch threads (default: torch's)")
    parser.add_argument("--skip-st", action="store_true", help="time only the engine")
    parser.add_argument("--cpu-linear", default="onednn", choices=("onednn", "torch"),
                        help="the engine's dense-layer kernels")
    parser.add_argument("--attention-study", action="store_true",
                        help="time the CPU attention candidates instead of the engines")
    parser.add_argument("--study-batches", type=at_least(1), default=2,
                        help="how many of the corpus's batches the attention study uses")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    directory = args.model or default_model_path()
    texts = corpus()
    engine = Engine.load(directory, dtype=args.dtype, cpu_linear=args.cpu_linear)
    tokenizer = load_tokenizer(Path(directory))
    if args.attention_study:
        attention_study(engine, tokenizer, texts, args.max_batch_tokens, args.repeats,
                        args.study_batches)
        return 0
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    real_tokens = sum(lengths)
    print(f"corpus: {len(texts)} texts, {real_tokens} real tokens, lengths {min(lengths)}-"
          f"{max(lengths)}; torch {torch.__version__}, {torch.get_num_threads()} threads",
          file=sys.stderr)

    def contender(engine: Engine, label: str):
        name = (f"hedgerow engine ({label}, {args.cpu_linear} linears, "
                f"{args.max_batch_tokens}-token batches)")
        return name, lambda: run_engine(engine, tokenizer, texts, args.max_batch_tokens)

    label = engine.info.dtype if args.dtype != "auto" else f"auto: {engine.info.dtype}"
    contenders = dict([contender(engine, label)])
    if args.dtype == "auto":
        print(f"auto chose {engine.info.dtype}: {engine.info.dtype_reason}", file=sys.stderr)
        if engine.info.dtype != "float32":
            full = Engine.load(directory, dtype="float32", cpu_linear=args.cpu_linear)
            contenders.update([contender(full, "float32")])
    if not args.skip_st:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(directory), device="cpu")
        contenders[f"sentence-transformers encode (fp32, batch {args.st_batch_size})"] = (
            lambda: model.encode(texts, batch_size=args.st_batch_size))
    # Interleaved rounds, so a burst of load on a shared machine hits both sides alike.
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for work in contenders.values():
        work()  # warm-up
    for _ in range(args.repeats):
        for name, work in contenders.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    rows = [(name, min(t), statistics.median(t)) for name, t in times.items()]

    print(f"| {'run':<70} | {'best s':>7} | {'median s':>8} | {'real tokens/s':>13} |")
    print(f"|{'-' * 72}|{'-' * 9}|{'-' * 10}|{'-' * 15}|")
    for name, best, median in rows:
        print(f"| {name:<70} | {best:7.3f} | {median:8.3f} | {real_tokens / best:13,.0f} |")
    by_label = dict(zip(contenders, rows))
    st = next((row for name, row in by_label.items() if name.startswith("sentence")), None)
    full = next((row for name, row in by_label.items() if "(float32" in name), None)
    if st is not None:
        print(f"\nhedgerow ({label}) against sentence-transformers, best runs: "
              f"{st[1] / rows[0][1]:.2f}x the throughput")
    if full is not None and full is not rows[0]:
        print(f"auto ({engine.info.dtype}) against float32, best runs: "
              f"{full[1] / rows[0][1]:.2f}x the throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
