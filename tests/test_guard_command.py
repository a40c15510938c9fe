"""`hedgerow guard`: every bad call exits 2 with one line naming what is wrong and no traceback,
before any model loads; and every `hedgerow guard` command the docs show is one the CLI takes.
test_space_process.py and test_space_integration.py run record and check for real."""

import argparse
import re
import shlex
from pathlib import Path

import pytest

from hedgerow import settings
from hedgerow.cli import main
from hedgerow.commands import guard
from hedgerow.golden_set import GoldenSet

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/operator.md", "docs/gateway.md", "docs/server.md")


def _run(capsys, *args):
    try:
        code = main(["guard", *args])
    except SystemExit as leaving:  # argparse's own refusals
        code = leaving.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def golden_file(tmp_path):
    from hedgerow.golden_set import GoldenSet

    path = tmp_path / "golden.json"
    golden = GoldenSet(model="m", fingerprint="s1-0a0a0a0a-1b1b1b1b", dimensions=2,
                       texts=("a",), vectors=((1.0, 0.0),))
    path.write_text(golden.to_json())
    return path


@pytest.mark.parametrize("args, said", [
    ([], "name an action: record or check"),
    (["bogus"], "invalid choice: 'bogus'"),
    (["record", "--texts", "{tmp}/absent.txt"], "--texts {tmp}/absent.txt: cannot read it: No "
                                                "such file or directory"),
    (["record", "--texts", "{tmp}/blank.txt"], "holds no text (one text per line)"),
    (["record", "--texts", "{tmp}/latin1.txt"], "is not UTF-8 text"),
    (["record", "--name", "Golden_Set"], "--name 'Golden_Set' is not a ConfigMap name"),
    (["record", "--dtype", "int8"], "--dtype: 'int8' is not one of float32, bfloat16"),
    (["record", "--output", "{tmp}/absent/golden.json"], "the folder {tmp}/absent does not exist"),
    (["record", "--pairs", "{tmp}/pairs.tsv"], "--pairs is for a cross-encoder (task rerank); "),
    (["record", "--task", "rerank", "--texts", "{tmp}/blank.txt"],
     "--texts is for an embedding or sparse model; "),
    (["record", "--task", "rerank", "--input-type", "query"],
     "--input-type is for an embedding or sparse model; "),
    (["record", "--task", "rerank", "--pairs", "{tmp}/blank.txt"],
     "--pairs {tmp}/blank.txt holds no pair (one `query<TAB>document` a line)"),
    (["record", "--task", "rerank", "--pairs", "{tmp}/one_column.tsv"],
     "--pairs {tmp}/one_column.tsv line 3: write one pair a line, the query and the document "
     "separated by one tab"),
    (["record", "--task", "rerank", "--pairs", "{tmp}/absent.tsv"],
     "--pairs {tmp}/absent.tsv: cannot read it: No such file or directory"),
    (["record", "--task", "classify"], "--task: 'classify' is not one of auto, embed, rerank"),
    (["check"], "the following arguments are required: URL"),
    (["check", "http://127.0.0.1:9"], "pass --golden FILE"),
    (["check", "ftp://gateway", "--golden", "{golden}"], "is not an http:// or https:// address"),
    (["check", "http://127.0.0.1:9", "--golden", "{tmp}/absent.json"],
     "cannot read it: No such file or directory"),
    (["check", "http://127.0.0.1:9", "--golden", "{tmp}/blank.txt"], "is not JSON"),
    (["check", "http://127.0.0.1:9", "--golden", "{golden}", "--min-cosine", "2"],
     "--min-cosine: 2.0 is above the maximum 1.0"),
    (["check", "http://127.0.0.1:9", "--golden", "{golden}", "--max-score-delta", "-1"],
     "--max-score-delta: -1.0 is below the minimum 0.0"),
    (["check", "http://127.0.0.1:9", "--golden", "{golden}"],
     "cannot reach http://127.0.0.1:9/v1/embeddings"),
    (["check", "http://127.0.0.1:9", "--golden", "{rerank_golden}"],
     "cannot reach http://127.0.0.1:9/rerank"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_bad_call_exits_2_with_one_clear_line(capsys, tmp_path, golden_file, args, said):
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "pairs.tsv").write_text("q\td\n")
    (tmp_path / "one_column.tsv").write_text("q\td\n\nq and d\n")
    rerank_golden = tmp_path / "rerank.json"
    rerank_golden.write_text(GoldenSet(
        model="ce", fingerprint="s1-0a0a0a0a-1b1b1b1b", dimensions=None, texts=(),
        vectors=None, task="rerank", pairs=(("q", "d"),), scores=(1.0,)).to_json())
    fill = {"tmp": str(tmp_path), "golden": str(golden_file),
            "rerank_golden": str(rerank_golden)}
    code, out, err = _run(capsys, *[arg.format(**fill) for arg in args])
    assert code == 2 and out == ""
    assert said.format(**fill) in err, err
    assert "Traceback" not in err and "engine.load" not in err


def _doc_commands() -> list[tuple[str, str]]:
    """Every `hedgerow guard ...` command in the docs' code blocks: (where, the command), with
    line continuations joined and what follows a pipe, a redirection or a comment left out."""
    found = []
    for name in DOCS:
        lines = (ROOT / name).read_text().splitlines()
        in_code, index = False, 0
        while index < len(lines):
            line, where = lines[index], f"{name}:{index + 1}"
            index += 1
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            while in_code and line.endswith("\\") and index < len(lines):
                line = line[:-1] + " " + lines[index]
                index += 1
            match = re.search(r"hedgerow guard [^|>#]*", line) if in_code else None
            if match:
                found.append((where, match.group(0).strip()))
    return found


def test_the_docs_show_the_guard_commands():
    shown = {command.split()[2] for _, command in _doc_commands()}
    assert shown == {"record", "check"}


@pytest.mark.parametrize("where, command", _doc_commands(), ids=lambda value: value)
def test_every_guard_command_the_docs_show_is_one_the_cli_takes(where, command):
    parser = argparse.ArgumentParser(prog="hedgerow guard")
    guard.configure_parser(parser)
    try:
        args = parser.parse_args(shlex.split(command)[2:])
    except SystemExit:
        pytest.fail(f"{where}: `{command}` is not a call `hedgerow guard` takes")
    kind = guard.RecordSettings if args.action == "record" else guard.CheckSettings
    settings.load(kind, args)  # choices and bounds, as the command checks them
