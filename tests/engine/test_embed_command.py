"""`hedgerow embed`: real tokenizer, real model, real JSON; every bad input exits 2 with one
specific line on stderr and no traceback. A few cases run the CLI as a subprocess; the rest
call `hedgerow.cli.main` in-process to keep the suite fast."""

import json
import shutil
import subprocess

import pytest
import torch
import transformers

from hedgerow.cli import main
from tests.conftest import hedgerow_command

TEXTS = ["A hedgerow is a line of closely spaced shrubs.", "Bees", "Rain fell on the fields."]


def _run(subprocess_env, *args, stdin=""):
    done = subprocess.run(hedgerow_command("embed", *args), capture_output=True, text=True,
                          env=subprocess_env, timeout=120, input=stdin)
    return done.returncode, done.stdout, done.stderr


def test_embeds_texts_like_sentence_transformers(subprocess_env, default_model_dir):
    from sentence_transformers import SentenceTransformer

    code, out, err = _run(subprocess_env, *TEXTS)
    assert code == 0, err
    assert "engine.load.done" in err and "seconds=" in err  # the timed loading step
    payload = json.loads(out)
    assert payload["model"] and payload["dimensions"] == 384
    assert [row["index"] for row in payload["data"]] == [0, 1, 2]
    ours = torch.tensor([row["embedding"] for row in payload["data"]])
    reference = SentenceTransformer(str(default_model_dir), device="cpu").encode(
        TEXTS, convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(ours, reference, dim=-1)
    assert bool((cosine >= 0.999).all()), cosine.tolist()
    torch.testing.assert_close(ours.norm(dim=-1), torch.ones(3))


def test_missing_model_path_subprocess(subprocess_env, tmp_path):
    code, out, err = _run(subprocess_env, "--model", str(tmp_path / "absent"), "hi")
    assert code == 2 and out == ""
    assert "model path" in err and "does not exist" in err and "Traceback" not in err


def test_no_texts_subprocess(subprocess_env):
    code, out, err = _run(subprocess_env)
    assert code == 2 and "no texts given" in err and "Traceback" not in err


def test_texts_piped_one_per_line_embed_as_arguments_do(subprocess_env):
    code, piped, err = _run(subprocess_env, "--log-level", "error",
                            stdin="\r\n".join(TEXTS) + "\n")
    assert code == 0, err
    _, given, _ = _run(subprocess_env, "--log-level", "error", *TEXTS)
    assert json.loads(piped) == json.loads(given)


def test_an_empty_piped_line_is_named(subprocess_env):
    code, out, err = _run(subprocess_env, stdin="one\n\nthree\n")
    assert code == 2 and out == ""
    assert "line 2 of standard input is empty" in err and "Traceback" not in err


def test_model_path_from_the_environment_subprocess(subprocess_env, tmp_path):
    subprocess_env["HEDGEROW_MODEL"] = str(tmp_path / "from-env")
    code, _, err = _run(subprocess_env, "hi")
    assert code == 2 and "from-env does not exist" in err


def _embed(capsys, *args):
    code = main(["embed", "--log-level", "error", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_dimensions_and_no_normalize(capsys):
    code, out, _ = _embed(capsys, "--dimensions", "8", "--no-normalize", "Bees")
    payload = json.loads(out)
    assert code == 0 and payload["dimensions"] == 8
    assert len(payload["data"][0]["embedding"]) == 8
    assert abs(torch.tensor(payload["data"][0]["embedding"]).norm().item() - 1.0) > 1e-3


def test_dimensions_larger_than_the_model(capsys):
    code, _, err = _embed(capsys, "--dimensions", "385", "Bees")
    assert code == 2 and "dimensions 385 (--dimensions or HEDGEROW_DIMENSIONS) is larger than the model's 384" in err


def test_empty_string(capsys):
    code, _, err = _embed(capsys, "fine", "")
    assert code == 2 and "text 1 is empty" in err


def test_whitespace_alone_is_embedded_as_the_tokenizer_encodes_it(capsys):
    code, out, _ = _embed(capsys, "fine", "  \t")
    assert code == 0 and len(json.loads(out)["data"]) == 2


def test_text_longer_than_the_limit_names_it(capsys):
    code, _, err = _embed(capsys, "short", "word " * 300)
    assert code == 2 and "text 1 has 302 tokens; the model accepts at most 256 tokens" in err


def test_directory_without_config(capsys, tmp_path):
    code, _, err = _embed(capsys, "--model", str(tmp_path), "hi")
    assert code == 2 and "no config.json in" in err


def _tiny_model_dir(tmp_path, default_model_dir, config):
    transformers.AutoModel.from_config(config).save_pretrained(tmp_path)
    shutil.copy(default_model_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    return tmp_path


def test_directory_without_weights(capsys, tmp_path, default_model_dir):
    shutil.copy(default_model_dir / "config.json", tmp_path / "config.json")
    code, _, err = _embed(capsys, "--model", str(tmp_path), "hi")
    assert code == 2 and "no weights in" in err and "model.safetensors" in err


def test_unsupported_architecture(capsys, tmp_path, default_model_dir):
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    path = _tiny_model_dir(tmp_path, default_model_dir, config)
    code, _, err = _embed(capsys, "--model", str(path), "hi")
    assert code == 2 and "unsupported architecture 'gpt2'" in err
    assert "supported: bert, roberta, xlm-roberta, distilbert, qwen3" in err


def test_token_ids_outside_the_vocabulary(capsys, tmp_path, default_model_dir):
    # The MiniLM tokenizer (30522 ids) in front of a model with a 97-token vocabulary.
    config = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=48)
    path = _tiny_model_dir(tmp_path, default_model_dir, config)
    code, _, err = _embed(capsys, "--model", str(path), "hello world")
    assert code == 2
    assert "text 0 has token id 101, outside the model's vocabulary [0, 97)" in err


def test_input_type_applies_the_models_template(capsys, tmp_path, default_model_dir):
    for item in default_model_dir.iterdir():
        if item.is_file():
            shutil.copy(item, tmp_path / item.name)
    shutil.copytree(default_model_dir / "1_Pooling", tmp_path / "1_Pooling")
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "document": ""}}))
    _, with_template, _ = _embed(capsys, "--model", str(tmp_path), "--input-type", "query", "Bees")
    _, spelled_out, _ = _embed(capsys, "--model", str(tmp_path), "query: Bees")
    _, plain, _ = _embed(capsys, "--model", str(tmp_path), "--input-type", "document", "Bees")
    vector = lambda out: json.loads(out)["data"][0]["embedding"]  # noqa: E731
    assert vector(with_template) == pytest.approx(vector(spelled_out), abs=1e-6)
    assert vector(plain) != pytest.approx(vector(with_template), abs=1e-3)


def test_unknown_device(capsys):
    code, _, err = _embed(capsys, "--device", "tpu", "hi")
    assert code == 2 and "device 'tpu'" in err


def test_directory_without_tokenizer(capsys, tmp_path):
    transformers.BertModel(transformers.BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=48)).save_pretrained(tmp_path)
    code, _, err = _embed(capsys, "--model", str(tmp_path), "hi")
    assert code == 2 and "no tokenizer.json in" in err


def test_batches_keep_input_order_within_the_token_budget():
    from hedgerow.commands.embed import batches

    sequences = [[1] * 3, [2] * 4, [3] * 9, [4] * 2, [5] * 2]
    cut = batches(sequences, max_batch_tokens=7)
    assert cut == [[[1] * 3, [2] * 4], [[3] * 9], [[4] * 2, [5] * 2]]
    assert [s for chunk in cut for s in chunk] == sequences


def test_a_text_that_tokenizes_to_nothing_is_named(default_model_dir):
    """Without a post-processor ([CLS] ... [SEP]) a lone combining accent (stripped by
    the normalizer) tokenizes to no ids; the
    error names that text, not a sequence of some later batch."""
    from tokenizers import Tokenizer

    from hedgerow.commands.embed import encode_texts
    from hedgerow.errors import InvalidInputError

    raw = json.loads((default_model_dir / "tokenizer.json").read_text())
    raw["post_processor"] = None
    tokenizer = Tokenizer.from_str(json.dumps(raw))
    tokenizer.no_padding()  # as load_tokenizer does: the packaged file pads to 128
    with pytest.raises(InvalidInputError, match="^text 2 tokenizes to no tokens$"):
        encode_texts(tokenizer, ["hello", "world", "\u0301"], "", 256, 30522)


def test_several_batches_give_the_same_vectors_in_order(capsys):
    _, one_batch, _ = _embed(capsys, *TEXTS)
    _, many_batches, _ = _embed(capsys, "--max-batch-tokens", "8", *TEXTS)
    one, many = json.loads(one_batch)["data"], json.loads(many_batches)["data"]
    assert [row["index"] for row in many] == [0, 1, 2]
    for a, b in zip(one, many):
        assert a["embedding"] == pytest.approx(b["embedding"], abs=1e-5)


def test_cpu_with_an_index_is_refused_clearly(capsys):
    code, _, err = _embed(capsys, "--device", "cpu:0", "hi")
    assert code == 2 and "device 'cpu:0' is not supported" in err


def test_output_failures_and_bad_argv_bytes_subprocess(subprocess_env):
    # A reader that goes away early is no error; a full disk is one line; argv bytes that are
    # not UTF-8 are named.
    reader = subprocess.Popen(hedgerow_command("embed", *[f"text {i}" for i in range(300)]),
                              env=subprocess_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    reader.stdout.read(10)
    reader.stdout.close()
    assert reader.wait(120) == 0
    assert b"Traceback" not in reader.stderr.read()
    with open("/dev/full", "w") as full:
        done = subprocess.run(hedgerow_command("embed", "hi"), env=subprocess_env, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2 and "cannot write the output: No space left" in done.stderr
    done = subprocess.run(hedgerow_command("embed") + [b"\xff"], env=subprocess_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "text 0 is not valid UTF-8" in done.stderr


def test_non_finite_output_is_refused(capsys, tmp_path, default_model_dir):
    from safetensors.torch import load_file, save_file

    shutil.copytree(default_model_dir, tmp_path / "broken")
    weights = load_file(default_model_dir / "model.safetensors")
    name = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, tmp_path / "broken" / "model.safetensors")
    code, out, err = _embed(capsys, "--model", str(tmp_path / "broken"), "hi")
    assert code == 2 and out == "" and "NaN or infinite values (first for text 0)" in err


def test_a_cross_encoder_is_refused_naming_its_task(subprocess_env, tmp_path):
    from tests.conftest import write_cross_encoder

    directory = write_cross_encoder(tmp_path / "reranker")
    code, out, err = _run(subprocess_env, "--model", str(directory), "hi")
    assert code == 2 and out == "" and "Traceback" not in err
    assert ("is a checkpoint for task 'rerank' (BertForSequenceClassification), not the "
            "'embed' asked for") in err
