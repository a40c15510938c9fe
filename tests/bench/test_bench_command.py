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


@pytest.mark.parametrize("args, message", [
    (["engine-cpu", "--repeats", "0"], "--repeats: invalid integer >= 1 value"),
    (["rerank-cpu", "--servers", "0"], "--servers: invalid integer >= 1 value"),
    (["server-overhead", "--tokens", "1"], "--tokens: invalid integer >= 2 value"),
    (["gateway-cpu", "--stand-in-ms", "0", "--server-flags", "--host-cpu off"],
     "--server-flags applies to the model server started here"),
    (["server-overhead", "--seconds", "0"], "--seconds: invalid number > 0 value"),
    (["server-start", "--steady-seconds", "nan"], "--steady-seconds: invalid number > 0 value"),
    (["server-cpu", "--requests", "0"], "--requests: invalid integer >= 1 value"),
    (["rerank-cpu", "--top-n", "0"], "--top-n: invalid integer >= 1 value"),
    (["topk", "--rows", "1,x"], "--rows: invalid comma-separated list of integers >= 1 value"),
    (["topk", "--k", "700"], "--k 700 is more than the narrowest --cols 672"),
    (["serving-gpu", "--charts", "2,9"], "--charts takes 1 to 5, got [2, 9]"),
])
def test_bad_benchmark_arguments_are_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_server_is_one_line(capsys):
    assert main(["bench", "server-cpu", "--address", "127.0.0.1:1", "--requests", "1"]) == 2
    assert "a gRPC call failed: UNAVAILABLE" in capsys.readouterr().err


def test_no_benchmark_name_lists_them(capsys):
    assert main(["bench"]) == 2
    assert "name a benchmark: engine-cpu, " in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["rerank-cpu", "--task", "sparse"],
     "rerank-cpu times the calls of a model of task embed or rerank; this model is of task "
     "sparse: it serves lexical weights, no ranking"),
    (["rerank-cpu", "--task", "rerank"], "--task rerank, but the model directory "),
])
def test_a_task_the_benchmark_does_not_time_is_refused_before_anything_starts(args, message,
                                                                             capsys):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert f"hedgerow bench: error: {message}" in err and "Traceback" not in err
