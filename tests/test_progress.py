"""Long steps draw a progress bar on a terminal and nothing elsewhere (their log lines say
how far along they are there)."""

import io
import json
import sys

from hedgerow.cli import main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _embed_stderr(monkeypatch, stream, capsys, *args) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    code = main(["embed", *args, "Hedgerows shelter birds.", "Bees"])
    assert code == 0
    assert len(json.loads(capsys.readouterr().out)["data"]) == 2
    return stream.getvalue()


def test_a_terminal_gets_bars_for_loading_and_embedding(monkeypatch, capsys):
    err = _embed_stderr(monkeypatch, Terminal(), capsys)
    assert "loading weights" in err and "tensor" in err
    assert "embedding" in err and "token" in err
    assert "event=embed.done" in err  # log lines still come, above the bar


def test_no_bar_off_a_terminal_or_below_info(monkeypatch, capsys):
    err = _embed_stderr(monkeypatch, io.StringIO(), capsys)
    assert "event=embed.done" in err and "loading weights" not in err
    err = _embed_stderr(monkeypatch, Terminal(), capsys, "--log-level", "warning")
    assert err == ""


def test_a_closed_stderr_is_no_error(subprocess_env):
    """Started with stderr closed (`2>&-`), Python's sys.stderr is None."""
    import subprocess

    from tests.conftest import hedgerow_command

    done = subprocess.run(hedgerow_command("embed", "hello there"), env=subprocess_env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120,
                          close_fds=True, preexec_fn=lambda: __import__("os").close(2))
    assert done.returncode == 0
    assert len(json.loads(done.stdout)["data"]) == 1
