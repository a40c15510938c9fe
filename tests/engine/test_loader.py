"""The loader on real (tiny, random-weight) checkpoint directories: sharded weights, the
sentence-transformers files, and every way a directory can be wrong."""

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.checkpoint import weight_files
from hedgerow.engine.engine import Engine
from hedgerow.engine.loader import load_model
from hedgerow.engine.positions import token_layout
from hedgerow.errors import ModelLoadError


def _tiny_bert_config(**overrides):
    values = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=64, max_position_embeddings=40)
    values.update(overrides)
    return transformers.BertConfig(**values)


@pytest.fixture
def bert_dir(tmp_path):
    torch.manual_seed(0)
    transformers.BertModel(_tiny_bert_config()).save_pretrained(tmp_path / "bert")
    return tmp_path / "bert"


def _hidden(loaded, ids):
    cu = torch.tensor([0, len(ids)], dtype=torch.int32)
    with torch.inference_mode():
        return loaded.model(torch.tensor(ids, dtype=torch.int32), token_layout(cu).position_ids,
                            cu, len(ids), CpuRaggedAttention())


def test_sharded_safetensors_with_an_index_load_like_one_file(tmp_path, bert_dir):
    torch.manual_seed(0)
    transformers.BertModel(_tiny_bert_config()).save_pretrained(tmp_path / "sharded",
                                                                max_shard_size="20KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    ids = [5, 9, 14, 2, 60]
    torch.testing.assert_close(_hidden(load_model(tmp_path / "sharded"), ids),
                               _hidden(load_model(bert_dir), ids), rtol=0, atol=0)


def test_a_sharded_checkpoints_weight_files_are_its_shards_and_index(tmp_path, bert_dir):
    """What the embedding space's weights digest reads: every shard and the index, no other
    file, and the one file of an unsharded checkpoint."""
    directory = tmp_path / "sharded"
    transformers.BertModel(_tiny_bert_config()).save_pretrained(directory, max_shard_size="20KB")
    (directory / "notes.safetensors.bak").write_text("not weights")
    expected = sorted([*directory.glob("model-*.safetensors"),
                       directory / "model.safetensors.index.json"])
    assert len(expected) > 3 and weight_files(directory) == expected
    assert weight_files(bert_dir) == [bert_dir / "model.safetensors"]


def test_defaults_without_sentence_transformers_files(bert_dir):
    info = Engine.load(bert_dir).info
    assert (info.pooling, info.normalize, info.max_tokens, info.templates) == ("mean", True, 40, {})
    assert (info.name, info.dimensions, info.vocab_size) == ("bert", 48, 97)


def test_sentence_transformers_files_set_the_defaults(bert_dir):
    (bert_dir / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"}]))
    (bert_dir / "1_Pooling").mkdir()
    (bert_dir / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 48, "pooling_mode_cls_token": True}))
    (bert_dir / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))
    (bert_dir / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "document": "passage: "}}))
    info = Engine.load(bert_dir).info
    assert (info.pooling, info.normalize, info.max_tokens) == ("cls", False, 32)
    assert info.templates == {"query": "query: ", "document": "passage: "}


def test_roberta_positions_leave_room_for_the_offset(tmp_path):
    transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=50, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=34, pad_token_id=1)).save_pretrained(tmp_path)
    assert Engine.load(tmp_path).info.max_tokens == 32  # positions start at padding_idx + 1


def test_roberta_positions_that_leave_no_room_are_refused(tmp_path):
    transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=50, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=34, pad_token_id=1)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["pad_token_id"] = 40
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"max_position_embeddings 34 leaves no position "
                                             r"for tokens \(roberta numbers positions from "
                                             r"pad_token_id \+ 1 = 41\)"):
        load_model(tmp_path)


@pytest.mark.parametrize("key, value, message", [
    ("hidden_act", "gelu", "hidden_act 'gelu' is not supported for qwen3"),
    ("use_sliding_window", True, "sliding-window attention .* is not supported"),
    ("layer_types", ["full_attention", "sliding_attention"], "sliding-window attention"),
    ("is_causal", "false", "is_causal must be true or false, got 'false'"),
])
def test_qwen3_settings_we_do_not_run_are_refused(tmp_path, key, value, message):
    config = transformers.Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=48)
    transformers.Qwen3Model(config).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw[key] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError, match=message):
        load_model(tmp_path)


def test_bfloat16_is_selectable(bert_dir):
    loaded = load_model(bert_dir, dtype="bfloat16")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    assert Engine.load(bert_dir, dtype="bfloat16").info.dtype == "bfloat16"


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nowhere")


def test_path_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelLoadError, match="is not a directory"):
        load_model(tmp_path / "file")


def test_no_config_json(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_no_weights(bert_dir):
    (bert_dir / "model.safetensors").unlink()
    (bert_dir / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError,
                       match=r"no weights .*model.safetensors.*found pytorch_model.bin"):
        load_model(bert_dir)


def test_unsupported_architecture_names_the_supported_ones(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    config["model_type"] = "gpt2"
    (bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError,
                       match=r"unsupported architecture 'gpt2'.*bert, roberta, xlm-roberta, "
                             r"distilbert, qwen3"):
        load_model(bert_dir)


def test_missing_tensors_are_named(bert_dir):
    tensors = load_file(bert_dir / "model.safetensors")
    del tensors["encoder.layer.1.attention.self.key.weight"]
    save_file(tensors, bert_dir / "model.safetensors")
    with pytest.raises(ModelLoadError,
                       match=r"missing tensors .*encoder\.layer\.1\.attention\.self\.key\.weight"):
        load_model(bert_dir)


def test_weights_that_do_not_fit_the_config(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    config["intermediate_size"] = 65
    (bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as raised:
        load_model(bert_dir)
    # One line in the checkpoint's own names, not torch's dump of our internal ones.
    assert str(raised.value) == (
        f"weights in {bert_dir} do not fit config.json: encoder.layer.0.intermediate.dense.weight "
        "has shape (64, 48), config.json implies (65, 48) (5 more tensors differ)")


def test_truncated_safetensors_file(bert_dir):
    weights = bert_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(ModelLoadError, match=r"cannot read .*model\.safetensors"):
        load_model(bert_dir)


def test_projections_that_cannot_be_fused(bert_dir):
    tensors = load_file(bert_dir / "model.safetensors")
    tensors["encoder.layer.0.attention.self.key.weight"] = torch.zeros(48, 40)
    save_file(tensors, bert_dir / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"cannot fuse encoder\.layer\.0\.attention"):
        load_model(bert_dir)


def test_index_naming_a_missing_shard(tmp_path):
    transformers.BertModel(_tiny_bert_config()).save_pretrained(tmp_path, max_shard_size="20KB")
    first = sorted(tmp_path.glob("model-*.safetensors"))[0]
    first.unlink()
    with pytest.raises(ModelLoadError, match=f"shards that are missing: {first.name}"):
        load_model(tmp_path)


@pytest.mark.parametrize("index", ['{"weight_map": "x"}', '{"weight_map": {"t": 5}}', '[1]',
                                   '{}', 'not json'])
def test_a_malformed_shard_index_is_named(tmp_path, index):
    transformers.BertModel(_tiny_bert_config()).save_pretrained(tmp_path, max_shard_size="20KB")
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ModelLoadError, match="is not a valid safetensors index"):
        load_model(tmp_path)


def test_unsupported_pooling_mode(bert_dir):
    (bert_dir / "1_Pooling").mkdir()
    (bert_dir / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_max_tokens": True}))
    with pytest.raises(ModelLoadError, match="pooling pooling_mode_max_tokens is not supported"):
        load_model(bert_dir)


def test_several_pooling_modes_are_refused(bert_dir):
    # sentence-transformers would concatenate cls and mean into a vector twice as wide
    (bert_dir / "1_Pooling").mkdir()
    (bert_dir / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}))
    with pytest.raises(ModelLoadError, match="pooling_mode_cls_token \\+ pooling_mode_mean_tokens"):
        load_model(bert_dir)


def test_unknown_dtype(bert_dir):
    with pytest.raises(ModelLoadError, match="dtype 'int8' is not supported"):
        load_model(bert_dir, dtype="int8")


def test_unreadable_config(bert_dir):
    (bert_dir / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read .*config.json"):
        load_model(bert_dir)


def test_qwen3_causal_comes_from_the_config_unless_overridden(tmp_path):
    config = transformers.Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=48)
    transformers.Qwen3Model(config).save_pretrained(tmp_path)
    assert load_model(tmp_path).config.causal is True
    assert Engine.load(tmp_path).info.pooling == "last"
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["use_bidirectional_attention"] = True
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert load_model(tmp_path).config.causal is False
    assert Engine.load(tmp_path).info.pooling == "mean"
    assert load_model(tmp_path, causal=True).config.causal is True


def test_config_that_is_not_an_object(bert_dir):
    (bert_dir / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelLoadError, match="config.json must hold a JSON object"):
        load_model(bert_dir)


def test_config_missing_a_size(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    del config["hidden_size"]
    (bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="hidden_size must be a positive integer"):
        load_model(bert_dir)


def test_config_with_a_number_that_is_not_one(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    config["layer_norm_eps"] = "small"
    (bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="layer_norm_eps must be a number, got 'small'"):
        load_model(bert_dir)


def test_sentence_transformers_last_token_pooling(tmp_path):
    config = transformers.Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=48)
    transformers.Qwen3ForCausalLM(config).save_pretrained(tmp_path)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_lasttoken": True}))
    info = Engine.load(tmp_path, causal=False).info
    assert (info.architecture, info.pooling, info.normalize) == ("qwen3", "last", True)


@pytest.mark.parametrize("head", [transformers.RobertaForMaskedLM,
                                  transformers.BertForTokenClassification])
def test_a_head_the_engine_would_drop_is_refused_naming_the_architecture(tmp_path, head):
    """A checkpoint saved with a head the engine does not compute is not served as a bare
    encoder (its head silently dropped). (BertForMaskedLM is served, as SPLADE:
    tests/engine/test_splade.py.)"""
    torch.manual_seed(0)
    config = _tiny_bert_config()
    if head is transformers.RobertaForMaskedLM:
        config = transformers.RobertaConfig(**config.to_dict())
    head(config).save_pretrained(tmp_path / "headed")
    with pytest.raises(ModelLoadError, match=rf"architecture '{head.__name__}' is not served"):
        load_model(tmp_path / "headed")


def test_architectures_of_different_tasks_are_refused(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    config["architectures"] = ["BertModel", "Unheard"]
    (bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"architecture 'Unheard' is not served"):
        load_model(bert_dir)
