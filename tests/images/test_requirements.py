"""images/requirements.py: the pip inputs each image installs its dependencies from."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[project]
name = "hedgerow"
[project.optional-dependencies]
engine = ["torch>=2.6", "numpy>=1.26"]
server = ["hedgerow[engine]", "grpcio>=1.85.1", "Typing_Extensions>=4; python_version < '4'"]
loop = ["hedgerow[loop]"]
"""
CONSTRAINTS = "# pins\ntorch==2.13.0\nnumpy==2.4.6\ngrpcio==1.85.3\ntyping-extensions==4.16.0\n"


@pytest.fixture
def project(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "constraints.txt").write_text(CONSTRAINTS)
    return tmp_path / "pyproject.toml", tmp_path / "constraints.txt"


def test_an_extra_expands_hedgerow_extras_and_drops_what_the_base_provides(
        requirements_script, project, tmp_path):
    out = tmp_path / "out"
    requirements_script.write(*project, out, extra="server", package=None,
                              provided=["Torch"])
    assert (out / "requirements.txt").read_text().splitlines() == [
        "numpy>=1.26", "grpcio>=1.85.1", "Typing_Extensions>=4; python_version < '4'"]
    # The pin goes too: pip must keep the base's CUDA torch, not install the CPU pin.
    assert (out / "constraints.txt").read_text().splitlines() == [
        "# pins", "numpy==2.4.6", "grpcio==1.85.3", "typing-extensions==4.16.0"]


def test_a_package_must_be_pinned(requirements_script, project, tmp_path):
    requirements_script.write(*project, tmp_path / "ok", extra=None, package="NumPy",
                              provided=[])
    assert (tmp_path / "ok" / "requirements.txt").read_text() == "NumPy\n"
    with pytest.raises(requirements_script.RequirementsError, match="pins no version of leftpad"):
        requirements_script.write(*project, tmp_path / "bad", extra=None, package="leftpad",
                                  provided=[])


def test_an_unpinned_requirement_of_an_extra_is_refused(requirements_script, project,
                                                        tmp_path):
    pyproject, constraints = project
    constraints.write_text("torch==2.13.0\n")
    with pytest.raises(requirements_script.RequirementsError,
                       match="pins no version of grpcio, numpy, typing-extensions"):
        requirements_script.write(pyproject, constraints, tmp_path / "out", extra="server",
                                  package=None, provided=[])


@pytest.mark.parametrize("extra, message", [("gpu", "has no extra 'gpu'"),
                                            ("loop", "includes itself")])
def test_a_bad_extra_is_named(requirements_script, project, tmp_path, extra, message):
    with pytest.raises(requirements_script.RequirementsError, match=message):
        requirements_script.write(*project, tmp_path / "out", extra=extra, package=None,
                                  provided=[])


def test_the_command_line_reports_errors_without_a_traceback(requirements_script, project,
                                                             tmp_path, capsys):
    pyproject, constraints = project
    assert requirements_script.main([str(pyproject), str(constraints), str(tmp_path / "o"),
                                     "--extra", "nope"]) == 2
    assert capsys.readouterr().err.startswith("requirements.py: pyproject.toml has no extra")
    assert requirements_script.main([str(tmp_path / "missing.toml"), str(constraints),
                                     str(tmp_path / "o"), "--extra", "server"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_real_server_pins_keep_torch_out(requirements_script, tmp_path):
    requirements_script.write(ROOT / "pyproject.toml", ROOT / "constraints.txt", tmp_path,
                              extra="server", package=None, provided=["torch"])
    names = set()
    for name in ("requirements.txt", "constraints.txt"):
        for line in (tmp_path / name).read_text().splitlines():
            if line and not line.startswith("#"):
                names.add(requirements_script.requirement_name(line)[0])
    assert "torch" not in names
    assert {"safetensors", "grpcio", "numpy"} <= names
