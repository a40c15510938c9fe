"""Cross-encoder scores and BGE-M3's lexical weights through the CUDA step path. Needs CUDA.

The same random-weight checkpoints as the CPU tests (tests/engine/test_cross_encoder.py,
test_lexical_weights.py) in bf16 on the GPU: compiled, in CUDA graphs (cold, warm and captured
steps all compared), against `transformers` in float32 on the same weights. bf16 moves a
score by a few hundredths, so scores are held to 0.1 (as the guard's default maxScoreDelta) and the ranking only where the
reference's scores are further apart than that; lexical weights to 5% of the row's largest.
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

import transformers  # noqa: E402

from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine.engine import Engine, fold_segments  # noqa: E402
from hedgerow.server.sparse import lexical_weights  # noqa: E402
from tests.conftest import random_pairs  # noqa: E402

VOCAB = 301
CLS, SEP = 2, 3
PAIRS = [(1, 1), (3, 9), (12, 30), (5, 60), (20, 2), (7, 44), (40, 200), (9, 9)]
SCORE_TOLERANCE = 0.1
UNUSED = frozenset({0, 1, 2, 3})  # BGE-M3's <s>, <pad>, </s>, <unk>


def _cross_encoder(directory, kind):
    torch.manual_seed(4321)
    common = dict(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=256, max_position_embeddings=600, initializer_range=0.2,
                  num_labels=1)
    if kind == "bert":
        model = transformers.BertForSequenceClassification(transformers.BertConfig(**common))
    else:
        model = transformers.XLMRobertaForSequenceClassification(
            transformers.XLMRobertaConfig(type_vocab_size=1, **common))
    model.eval().save_pretrained(directory)
    return model.float().cuda()


def _pairs():
    return random_pairs(PAIRS, 9, VOCAB, CLS, SEP)


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_cross_encoder_scores_on_the_gpu_match_transformers(kind, tmp_path):
    reference = _cross_encoder(tmp_path, kind)
    engine = Engine.load(tmp_path, device="cuda", dtype="bfloat16")
    assert engine.info.task == "rerank"
    ids, types = _pairs()
    two_types = reference.config.type_vocab_size > 1
    flat = np.array([t for s in ids for t in s], dtype=np.int32)
    if two_types:
        flat = fold_segments(flat, np.array([t for s in types for t in s], dtype=np.int32),
                             VOCAB)
    lengths = [len(s) for s in ids]
    batch = RaggedBatch(torch.from_numpy(flat),
                        torch.tensor(np.cumsum([0, *lengths]), dtype=torch.int32), max(lengths))
    expected = []
    with torch.inference_mode():
        for seq, seq_types in zip(ids, types):
            kwargs = {"token_type_ids": torch.tensor([seq_types]).cuda()} if two_types else {}
            expected.append(float(reference(input_ids=torch.tensor([seq]).cuda(),
                                            **kwargs).logits[0, 0]))
    expected = np.array(expected)
    runs = [engine.step(batch).synchronize()[:, 0].numpy() for _ in range(3)]  # cold, warm, captured
    assert engine.warmup_report()["captured"] >= 1
    for ours in runs:
        np.testing.assert_allclose(ours, expected, rtol=0, atol=SCORE_TOLERANCE)
        for i in range(len(PAIRS)):
            for j in range(len(PAIRS)):
                if expected[i] > expected[j] + 2 * SCORE_TOLERANCE:
                    assert ours[i] > ours[j], (i, j, ours, expected)
    # The test can fail: the scores are spread far wider than the tolerance.
    assert np.ptp(expected) > 4 * SCORE_TOLERANCE


def test_lexical_weights_on_the_gpu_match_the_reference(tmp_path):
    torch.manual_seed(11)
    config = transformers.XLMRobertaConfig(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=256, max_position_embeddings=600, initializer_range=0.2)
    model = transformers.XLMRobertaModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(tmp_path)
    head = torch.nn.Linear(128, 1)
    with torch.no_grad():
        head.weight.normal_(0, 0.3)
        head.bias.zero_()
    torch.save(head.state_dict(), tmp_path / "sparse_linear.pt")
    model, head = model.float().cuda(), head.cuda()
    generator = torch.Generator().manual_seed(5)
    sequences = [[0, *torch.randint(4, VOCAB, (n,), generator=generator).tolist(), 2]
                 for n in (1, 9, 60, 300)]
    engine = Engine.load(tmp_path, device="cuda", dtype="bfloat16", task="sparse")
    batch = RaggedBatch.from_sequences(sequences)
    for _ in range(3):  # cold, warm, captured
        rows = engine.step(batch).synchronize().numpy()
        ours = lexical_weights(batch.input_ids.numpy(), batch.cu_seqlens.tolist(), rows, UNUSED)
        with torch.inference_mode():
            for seq, row, (kept, values) in zip(sequences, rows, ours):
                hidden = model(input_ids=torch.tensor([seq]).cuda()).last_hidden_state[0]
                weights = torch.relu(head(hidden))[:, 0].cpu().numpy()
                scale = max(float(weights.max()), 1e-6)
                assert np.abs(row[:len(seq)] - weights).max() <= 0.05 * scale
                assert not row[len(seq):].any()
                assert set(kept.tolist()) <= set(seq) - UNUSED and (values > 0).all()
                # Tokens well above zero in the reference are kept by ours.
                clear = {t for t, w in zip(seq, weights) if w > 0.1 * scale} - UNUSED
                assert clear <= set(kept.tolist())
    assert engine.warmup_report()["captured"] >= 1
