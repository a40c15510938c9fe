"""The bucket grid's arithmetic and the hot-set spelling (hedgerow.graph_grid): plain numbers."""

import pytest

from hedgerow.errors import ConfigError
from hedgerow.graph_grid import Config, GraphGrid, format_shape, parse_hot_set, parse_shape


def test_token_buckets_are_64s_to_1024_then_256s():
    grid = GraphGrid(max_tokens=2048)
    buckets = grid.token_buckets()
    assert buckets[:3] == [64, 128, 192] and buckets[15] == 1024
    assert buckets[16:] == [1280, 1536, 1792, 2048]
    assert [grid.token_bucket(n) for n in (1, 63, 64, 65, 1000, 1024, 1025, 1281, 2048)] == [
        64, 64, 64, 128, 1024, 1024, 1280, 1536, 2048]
    assert grid.token_bucket(2049) is None and grid.token_bucket(0) is None


def test_sequence_slots_bucketed_or_exact():
    bucketed = GraphGrid(max_seqs=16, seq_buckets=(1, 2, 4, 8, 16))
    assert [bucketed.seq_slots(b) for b in (1, 2, 3, 5, 9, 16)] == [1, 2, 4, 8, 16, 16]
    assert bucketed.seq_slots(17) is None
    exact = GraphGrid(max_seqs=16, seq_buckets=())
    assert [exact.seq_slots(b) for b in (1, 3, 7, 16)] == [1, 3, 7, 16]
    assert exact.size() == 16 * len(exact.token_buckets())


def test_past_the_grid_has_no_configuration():
    grid = GraphGrid(max_tokens=1024, max_seqs=8, seq_buckets=(1, 8))
    assert grid.config_for(3, 100) == Config(8, 128)
    assert grid.config_for(9, 100) is None
    assert grid.config_for(1, 1025) is None


@pytest.mark.parametrize("kwargs, words", [
    ({"max_tokens": 1100}, "multiple of 256"),
    ({"max_tokens": 1000}, "multiple of 64"),
    ({"max_tokens": 32}, "--graph-max-tokens"),
    ({"seq_buckets": (1, 4, 2, 64)}, "increasing"),
    ({"max_seqs": 32, "seq_buckets": (1, 16)}, "must equal"),
])
def test_bad_grids_say_what_to_change(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        GraphGrid(**kwargs)


def test_hot_set_parsing():
    grid = GraphGrid(max_tokens=2048, max_seqs=8, seq_buckets=(1, 2, 4, 8))
    assert parse_hot_set(["1x128", "1x100", "3x1100"], grid) == [Config(1, 128), Config(4, 1280)]
    for bad, words in (("1-128", "SEQSxTOKENS"), ("9x128", "past the grid"),
                       ("4x2", "fewer tokens"), ("1x4096", "--graph-max-tokens"),
                       ("0x0", "at least one sequence")):
        with pytest.raises(ConfigError, match=words):
            parse_hot_set([bad], grid)


def test_a_shape_reads_back_as_written():
    assert parse_shape(format_shape(8, 512)) == (8, 512)
    assert parse_shape(" 1X128 ") == (1, 128)
    with pytest.raises(ConfigError, match="SEQSxTOKENS"):
        parse_shape("1x")


def test_uniform_configurations_sit_beside_the_grid():
    grid = GraphGrid(max_tokens=2048, max_seqs=8, seq_buckets=(1, 2, 4, 8))
    config = grid.uniform_for(3, 500)
    assert config == Config(3, 1500, 500) == Config.dense(3, 500)
    assert str(config) == "3x1500u" and str(Config(4, 1536)) == "4x1536"
    assert config != Config(3, 1500)  # the ragged configuration of the same size is another
    # one sequence, too many sequences or tokens: no uniform configuration
    assert grid.uniform_for(1, 500) is None
    assert grid.uniform_for(9, 10) is None
    assert grid.uniform_for(8, 257) is None
    assert grid.uniform_for(4, 0) is None
    assert grid.size() == 4 * len(grid.token_buckets())
