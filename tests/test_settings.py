"""Settings: flags beat environment variables beat defaults; bad values fail clearly."""

import argparse
import dataclasses
from pathlib import Path

import pytest

from hedgerow import settings
from hedgerow.errors import ConfigError
from hedgerow.settings import setting


@dataclasses.dataclass(frozen=True)
class Sample:
    max_batch_tokens: int = setting(512, "Token budget per batch.", unit="tokens", minimum=1)
    model: Path | None = setting(None, "Model directory.")
    normalize: bool = setting(True, "L2-normalise.")
    servers: tuple[str, ...] = setting(("a:1",), "Servers.")
    mode: str = setting("fast", "Mode.", choices=("fast", "slow"))
    grace: float = setting(30.0, "Grace.", unit="seconds", minimum=0)
    prefix: str | None = setting(None, "Prefix.", literal=True)


def parse(argv, environ=None):
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, Sample)
    return settings.load(Sample, parser.parse_args(argv), environ or {})


def test_defaults():
    assert parse([]) == Sample()


def test_environment_then_flag_precedence():
    env = {"HEDGEROW_MAX_BATCH_TOKENS": "1024", "HEDGEROW_NORMALIZE": "false"}
    assert parse([], env).max_batch_tokens == 1024
    assert parse([], env).normalize is False
    assert parse(["--max-batch-tokens", "64"], env).max_batch_tokens == 64
    assert parse(["--normalize"], env).normalize is True


def test_types_are_parsed():
    loaded = parse(["--model", "/m", "--servers", "x:1, y:2"])
    assert loaded.model == Path("/m")
    assert loaded.servers == ("x:1", "y:2")


def test_empty_is_unset_unless_the_setting_is_literal():
    assert parse([], {"HEDGEROW_MODEL": ""}).model is None
    assert parse(["--model", "none"]).model is None
    assert parse([], {"HEDGEROW_PREFIX": ""}).prefix == ""
    assert parse(["--prefix", ""]).prefix == ""
    assert parse([]).prefix is None
    assert parse([], {"HEDGEROW_PREFIX": "query: "}).prefix == "query: "
    assert parse([], {"HEDGEROW_PREFIX": "none"}).prefix == "none"
    assert parse([], {"HEDGEROW_PREFIX": "  "}).prefix == "  "


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--max-batch-tokens", "lots"], {}, "expected int"),
        (["--max-batch-tokens", "0"], {}, "below the minimum"),
        ([], {"HEDGEROW_NORMALIZE": "maybe"}, "expected true or false"),
        (["--mode", "medium"], {}, "not one of fast, slow"),
        (["--grace", "nan"], {}, "--grace: expected a number"),
    ],
)
def test_bad_values_name_the_setting(argv, env, message):
    with pytest.raises(ConfigError, match=message):
        parse(argv, env)


def test_help_names_the_environment_variable():
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, Sample)
    text = parser.format_help()
    assert "HEDGEROW_MAX_BATCH_TOKENS" in text and "Unit: tokens" in text
