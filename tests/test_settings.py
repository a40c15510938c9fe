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
    buckets: tuple[int, ...] = setting((1, 2), "Buckets.", minimum=1, max_items=3)
    tag: str = setting("v1", "Tag.", pattern=r"v[0-9]+")


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
    loaded = parse(["--model", "/m", "--servers", "x:1, y:2", "--buckets", "1, 4,8"])
    assert loaded.model == Path("/m")
    assert loaded.servers == ("x:1", "y:2")
    assert loaded.buckets == (1, 4, 8)
    assert parse(["--buckets", ""]).buckets == ()


def test_every_value_reads_back_from_its_environment_spelling():
    written = Sample(max_batch_tokens=7, model=Path("/m"), normalize=False, servers=("a:1", "b:2"),
                     mode="slow", grace=2.5, prefix="", buckets=(3,))
    environ = {settings.env_name(f.name): settings.env_value(getattr(written, f.name))
               for f in settings.fields_of(Sample)}
    assert parse([], environ) == written


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
        (["--buckets", "1,x"], {}, "--buckets: expected int, got 'x'"),
        (["--buckets", "1,0"], {}, "--buckets: 0 is below the minimum 1"),
        ([], {"HEDGEROW_BUCKETS": "1,2,3,4"}, "HEDGEROW_BUCKETS: 4 entries, at most 3"),
        (["--tag", "v1x"], {}, r"--tag: 'v1x' is not a match of v\[0-9\]\+"),
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
    assert "Default: 1,2." in text


def test_the_parsed_view_and_the_docs_table():
    fields = {f.name: f for f in settings.fields_of(Sample)}
    assert (fields["buckets"].kind, fields["buckets"].item_kind) == (tuple, int)
    assert fields["model"].optional and fields["model"].kind is Path
    assert fields["max_batch_tokens"].env == "HEDGEROW_MAX_BATCH_TOKENS"
    rows = settings.markdown_table(Sample).splitlines()
    assert rows[0] == "| flag | environment | default | meaning |"
    assert "| `--max-batch-tokens` | `HEDGEROW_MAX_BATCH_TOKENS` | `512` | Token budget per " \
           "batch. Unit: tokens. |" in rows
    assert "| `--mode` | `HEDGEROW_MODE` | `fast` | Mode. One of: fast, slow. |" in rows
    assert len(rows) == 2 + len(fields)


def test_one_setting_loads_alone_from_the_environment():
    # A probe reads one setting; another one's bad value is not its concern.
    env = {"HEDGEROW_MAX_BATCH_TOKENS": "1024", "HEDGEROW_MODE": "warp", "HEDGEROW_MODEL": ""}
    assert settings.load_one(Sample, "max_batch_tokens", env) == 1024
    assert settings.load_one(Sample, "grace", env) == 30.0
    assert settings.load_one(Sample, "model", env) is None
    with pytest.raises(ConfigError, match="HEDGEROW_MODE: 'warp' is not one of fast, slow"):
        settings.load_one(Sample, "mode", env)
    with pytest.raises(ConfigError, match="HEDGEROW_MAX_BATCH_TOKENS: 0 is below the minimum"):
        settings.load_one(Sample, "max_batch_tokens", {"HEDGEROW_MAX_BATCH_TOKENS": "0"})
