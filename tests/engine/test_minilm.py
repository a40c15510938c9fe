"""The engine against sentence-transformers on the packaged all-MiniLM-L6-v2 (real weights).

One ragged batch holds sequences of 1 to 256 tokens; sentence-transformers embeds each one on
its own (no padding), through its full module stack including its Normalize module, and our
pooled vectors, normalised by `postprocess`, must match each of them (cosine >= 0.999).
"""

import pytest
import torch
from tokenizers import Tokenizer

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.engine.pooling import postprocess

LENGTHS = [1, 2, 3, 5, 8, 13, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256]
TEXT = ("Hedgerows are rows of shrubs and trees that mark field boundaries; they shelter birds, "
        "insects and small mammals, slow the wind, hold the soil and carry centuries of "
        "history in their species mix. ") * 12


@pytest.fixture(scope="module")
def engine(default_model_dir):
    return Engine.load(default_model_dir)


@pytest.fixture(scope="module")
def sequences(default_model_dir):
    tokenizer = Tokenizer.from_file(str(default_model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    ids = tokenizer.encode(TEXT).ids  # [CLS] ... [SEP]
    assert len(ids) > max(LENGTHS)
    # Each sequence: a different window of real text, starting with [CLS], ending with [SEP].
    out = []
    for i, n in enumerate(LENGTHS):
        body = ids[1 + i: 1 + i + max(n - 2, 0)]
        seq = ([ids[0]] + body + [ids[-1]])[:n]
        assert len(seq) == n
        out.append(seq)
    return out


def test_info_comes_from_the_sentence_transformers_files(engine):
    info = engine.info
    assert (info.architecture, info.dimensions, info.max_tokens) == ("bert", 384, 256)
    assert (info.pooling, info.normalize, info.vocab_size) == ("mean", True, 30522)
    assert (info.dtype, info.device) == ("float32", "cpu")


def test_one_ragged_batch_matches_sentence_transformers(engine, sequences, default_model_dir):
    from sentence_transformers import SentenceTransformer

    reference_model = SentenceTransformer(str(default_model_dir), device="cpu")
    batch = RaggedBatch.from_sequences(sequences)
    engine.validate(batch)
    ours = torch.from_numpy(postprocess(engine.step(batch).synchronize().numpy(),
                                        normalize=True, dimensions=None))
    assert ours.shape == (len(sequences), 384) and ours.dtype == torch.float32
    with torch.inference_mode():
        for i, seq in enumerate(sequences):
            ids = torch.tensor([seq])
            features = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "token_type_ids": torch.zeros_like(ids)}
            ref = reference_model(features)["sentence_embedding"][0]
            assert ref.norm().item() == pytest.approx(1.0, abs=1e-4)  # ST normalised it too
            cosine = torch.nn.functional.cosine_similarity(ours[i], ref, dim=0).item()
            assert cosine >= 0.999, f"sequence {i} ({len(seq)} tokens): cosine {cosine}"


def test_a_sequence_inside_a_batch_equals_it_alone(engine, sequences):
    together = engine.step(RaggedBatch.from_sequences(sequences)).synchronize()
    for i in (0, 7, len(sequences) - 1):
        alone = engine.step(RaggedBatch.from_sequences([sequences[i]])).synchronize()[0]
        torch.testing.assert_close(together[i], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 2, 5])
def test_a_short_sequence_alone_is_bit_identical_to_it_in_a_batch(engine, length):
    # One token alone is a one-row matrix product, which BLAS sums in another order.
    target = [101, 2000, 2001, 2002, 102][:length]
    alone = engine.step(RaggedBatch.from_sequences([target])).synchronize()
    together = engine.step(RaggedBatch.from_sequences([[1000], target, [7, 8]])).synchronize()
    assert alone.shape == (1, 384)
    assert torch.equal(alone[0], together[1])


def test_step_returns_a_completed_lazy_tensor_on_cpu(engine, sequences):
    lazy = engine.step(RaggedBatch.from_sequences(sequences[:3]))
    assert lazy.ready()
    assert lazy.synchronize().shape == (3, 384)


def test_bfloat16_stays_close_to_float32(default_model_dir, engine, sequences):
    batch = RaggedBatch.from_sequences(sequences)
    low = Engine.load(default_model_dir, dtype="bfloat16").step(batch).synchronize()
    assert low.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(low, engine.step(batch).synchronize(), dim=-1)
    assert bool((cosine >= 0.99).all()), cosine.tolist()
