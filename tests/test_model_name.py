"""A model directory's name is the same in the server's Info, `hedgerow embed` and /v1/models."""

from hedgerow.defaults import DEFAULT_MODEL_NAME, default_model_path, model_name


def test_the_packaged_default_goes_by_its_model_name():
    assert model_name(default_model_path()) == DEFAULT_MODEL_NAME == "all-MiniLM-L6-v2"


def test_other_folders_go_by_their_name_or_their_parent_s_when_generic(tmp_path):
    (tmp_path / "bge-m3" / "model").mkdir(parents=True)
    assert model_name(tmp_path / "bge-m3") == "bge-m3"
    assert model_name(tmp_path / "bge-m3" / "model") == "bge-m3"
    assert model_name(tmp_path / "bge-m3" / "model" / "..") == "bge-m3"
