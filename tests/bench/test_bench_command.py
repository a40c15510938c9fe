"""`hedgerow bench`: every listed benchmark imports and answers --help; unknown names fail."""

import pytest

from hedgerow.cli import main
from hedgerow.commands.bench import BENCHMARKS


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_benchmark_answers_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", name, "--help"])
    assert exit_info.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()


def test_unknown_benchmark_is_rejected(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "no-such-benchmark"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
