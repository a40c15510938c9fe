"""Score on a CUDA server (the small random-weight XLM-R of test_server_gpu.py). Needs CUDA.

The ranking runs on the engine thread through kernels.topk (the Triton kernel for top_n <= 64,
the reference above). Checks: the answer equals the CPU reference top-k of the cosine of the
same server's Embed rows (indices and scores exactly), which holds only if a sequence's pooled
row does not depend on the batch it ran in; and duplicates placed in different batches tie.
Not yet run on a GPU: run it on the H200 with `-m gpu`.
"""

import grpc
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.engine.scoring import cosine_scores  # noqa: E402
from hedgerow.kernels.topk_reference import topk_reference  # noqa: E402
from hedgerow.server.convert import decode_embeddings  # noqa: E402
from hedgerow.wire import embed_pb2, embed_pb2_grpc  # noqa: E402
from tests.server.conftest import embed_request  # noqa: E402
from tests.server.test_server_gpu import VOCAB, model_dir, server  # noqa: E402,F401 (fixtures)


def _sequences():
    rng = np.random.default_rng(3)
    query = rng.integers(3, VOCAB, size=20).tolist()
    documents = [rng.integers(3, VOCAB, size=int(n)).tolist() for n in rng.integers(5, 120, 40)]
    for position in (21, 39):            # the same document, far apart: other batches
        documents[position] = documents[2]
    return query, documents


@pytest.mark.parametrize("top_n", [1, 16, 64, 100])
def test_gpu_score_equals_the_reference_on_embed_rows(server, top_n):
    query, documents = _sequences()
    packed = embed_request([query, *documents])
    with grpc.insecure_channel(server.address) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        rows = decode_embeddings(stub.Embed(embed_request([query, *documents], normalize=False),
                                            timeout=120))
        answer = stub.Score(embed_pb2.ScoreRequest(input_ids=packed.input_ids,
                                                   cu_seqlens=packed.cu_seqlens, top_n=top_n),
                            timeout=120)
    rows = torch.from_numpy(rows.copy())
    scores = cosine_scores(rows[0], rows[1:])
    indices, values = topk_reference(scores[None, :], min(top_n, len(documents)))
    assert list(answer.indices) == indices[0].tolist()
    np.testing.assert_array_equal(np.asarray(answer.scores, np.float32), values[0].numpy())
    ranked = dict(zip(answer.indices, answer.scores))
    if 2 in ranked:
        assert ranked[2] == ranked.get(21, ranked[2]) == ranked.get(39, ranked[2])
