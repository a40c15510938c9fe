"""The committed gRPC stubs are what `make proto` generates from wire/*.proto today."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "tools" / "gen_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_the_proto(tmp_path):
    written = load_generator().generate(tmp_path)
    assert written, "the generator wrote nothing"
    for fresh in written:
        committed = ROOT / "wire" / fresh.name
        assert committed.exists(), f"wire/{fresh.name} is missing: run `make proto`"
        assert committed.read_text() == fresh.read_text(), (
            f"wire/{fresh.name} is stale: run `make proto` and commit the result"
        )
