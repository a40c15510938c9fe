"""Long texts tokenized in pieces (gateway/text_pieces.py) give exactly the whole text's ids:
the packaged model's WordPiece tokenizer, and byte-level BPE and SentencePiece-style Unigram
tokenizers trained here on a small corpus (the real BGE-M3 and Qwen3 tokenizer files are not
available offline; these have the same pipelines: ByteLevel regex pre-tokenizer, NFC; Metaspace
with NFKC and the collapsing of repeated spaces)."""

import os
import random
import subprocess
import sys

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer, UnigramTrainer

from hedgerow.defaults import default_model_path
from hedgerow.gateway.text_pieces import MAX_PIECES, PIECE_CHARS, TextPieces, piece_count, pieces
from hedgerow.space import probe_texts

WORDS = ("hedgerow hawthorn blackthorn wren robin 2024 8,849 x86-64 café naïve Straße "
         "über 東京 日本の首都 😀 don't we'll (bracketed) a+b=c; e-mail: user@example.com "
         "Ünïcödé ÀÉÎ ﬁ ① ｆｕｌｌ x̧").split()
SEPARATORS = [" "] * 12 + ["  ", "\n", "\t", " \n ", "   ", ". ", ", "]


def random_text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    while sum(map(len, parts)) < chars:
        parts += [rng.choice(WORDS), rng.choice(SEPARATORS)]
    return "".join(parts)


@pytest.fixture(autouse=True)
def tokenizer_threads(monkeypatch):
    """Cutting needs the tokenizer's threads; these tests check the ids, on any machine."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})


def plain(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def corpus() -> list[str]:
    rng = random.Random(1)
    return probe_texts() + [random_text(rng, 400) for _ in range(200)]


def byte_level_bpe() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus(), BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    end = tokenizer.token_to_id("<|endoftext|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", end)])
    return plain(tokenizer)


def metaspace_unigram() -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.train_from_iterator(corpus(), UnigramTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<unk>"], unk_token="<unk>"))
    tokenizer.post_processor = processors.RobertaProcessing(
        ("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>")))
    return plain(tokenizer)


def packaged() -> Tokenizer:
    return plain(Tokenizer.from_file(str(default_model_path() / "tokenizer.json")))


@pytest.mark.parametrize("make", [packaged, byte_level_bpe, metaspace_unigram],
                         ids=["wordpiece", "byte-level-bpe", "metaspace-unigram"])
def test_long_texts_in_pieces_give_the_whole_texts_ids(make):
    tokenizer = make()
    cut = TextPieces(tokenizer, probe_texts())
    assert cut.mode is not None  # the check passed: long texts are cut
    rng = random.Random(7)
    requests = [[random_text(rng, rng.randint(2 * PIECE_CHARS, 12_000))] for _ in range(60)]
    requests += [[random_text(rng, 4_000), "short", random_text(rng, 1_500)] for _ in range(10)]
    requests += [["the whole " * 300], ["nocutshere" * 200], [""], ["a " * 2_000]]
    assert len(pieces(requests[0][0], cut.mode, piece_count(requests[0][0]))) > 1
    for texts in requests:
        whole = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts)]
        assert cut.encode(texts) == whole


def test_a_tokenizer_whose_pieces_differ_is_never_cut():
    # No pre-tokenizer: a word-level model sees the whole text as one word (unknown, one id);
    # two pieces would be two.
    tokenizer = plain(Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    cut = TextPieces(tokenizer, probe_texts())
    assert cut.mode is None
    text = "word " * 1_000
    assert cut.encode([text]) == [[0]]


def test_a_tokenizer_with_an_added_token_across_a_cut_is_never_cut():
    tokenizer = packaged()
    assert TextPieces(tokenizer, probe_texts()).mode is not None
    tokenizer.add_tokens(["hedge row"])
    cut = TextPieces(tokenizer, probe_texts())
    assert cut.mode is None
    text = "the hedge row " * 300
    assert cut.encode([text]) == [tokenizer.encode(text).ids]


@pytest.mark.parametrize("setting", ["false", "0", "OFF", ""])
def test_nothing_is_cut_where_the_tokenizers_threads_are_turned_off(monkeypatch, setting):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", setting)
    assert TextPieces(packaged(), probe_texts()).mode is None


def test_nothing_is_cut_on_one_cpu(monkeypatch):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert TextPieces(packaged(), probe_texts()).mode is None


def test_cuts_fall_on_single_spaces_between_ascii_letters_or_digits():
    text = "alpha beta  gamma\tdelta é ü 東京 9 8 " + "x y " * 600
    for mode in ("keep", "drop"):
        parts = pieces(text, mode, 6)
        assert len(parts) == 6
        assert ("" if mode == "keep" else " ").join(parts) == text
        for left, right in zip(parts, parts[1:]):
            assert left[-1].isascii() and left[-1].isalnum()
            assert (right[1] if mode == "keep" else right[0]) in "xy"
            assert mode == "drop" or right[0] == " "
    assert pieces("no_space_at_all" * 100, "keep", 4) == ["no_space_at_all" * 100]


def test_piece_count_grows_with_length_up_to_the_cap():
    assert piece_count("a" * (2 * PIECE_CHARS)) == 1
    assert piece_count("a" * (2 * PIECE_CHARS + 1)) == 2
    assert piece_count("a" * (5 * PIECE_CHARS)) == 5
    assert piece_count("a" * (100 * PIECE_CHARS)) == MAX_PIECES


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the tokenizer's threads need 2 CPUs")
def test_the_load_check_leaves_the_tokenizers_threads_to_forked_workers(subprocess_env):
    """The gateway's parent loads the tokenizer (and runs the check) before it forks its
    workers. `tokenizers` turns its threads off in a child forked after they ran, which would
    leave every piece on one thread; so the check runs on one thread, and a worker's pieces
    start the tokenizer's threads (counted in /proc: Linux)."""
    script = (
        "import os\n"
        "from hedgerow.defaults import default_model_path\n"
        "from hedgerow.gateway.tokenizer import TextTokenizer\n"
        "TextTokenizer(default_model_path(), threads=1).close()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    worker = TextTokenizer(default_model_path(), threads=1)\n"
        "    worker.encode_sync(['the hedge ' * 500], '', 4096, False)\n"
        "    os._exit(0 if len(os.listdir('/proc/self/task')) > 1 else 3)\n"
        "assert os.waitpid(pid, 0)[1] == 0, 'the worker tokenized on one thread'\n")
    env = {k: v for k, v in subprocess_env.items() if k != "TOKENIZERS_PARALLELISM"}
    done = subprocess.run([sys.executable, "-P", "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
