"""Write the pip inputs of one image: an extra's requirements and the project's pins.

Usage: python -P requirements.py PYPROJECT CONSTRAINTS OUT_DIR --extra NAME [--provided NAME]...
       python -P requirements.py PYPROJECT CONSTRAINTS OUT_DIR --package NAME

Writes OUT_DIR/requirements.txt (the extra's requirements from pyproject.toml, with extras of
hedgerow itself expanded, or the one named package) and OUT_DIR/constraints.txt (the project's
constraints.txt), for `pip install -r requirements.txt -c constraints.txt`. The images install
their dependencies from these two files alone, before any source is copied, so editing code
leaves the dependency layer cached, and they get the versions CI tested.

A `--provided` package comes with the base image (the server's CUDA torch): it is dropped from
both files, so pip keeps the base's build instead of replacing it with the CPU pin. It runs on
the base image's Python before anything is installed: standard library only.
"""

import argparse
import re
import sys
import tomllib
from pathlib import Path

PROJECT = "hedgerow"
# A requirement's name and optional extras: `uvicorn[standard]>=0.30` -> uvicorn, standard.
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


class RequirementsError(Exception):
    """A pyproject.toml or constraints file this script cannot use; the message says why."""


def canonical(name: str) -> str:
    """PEP 503 normal form: `Typing_Extensions` and `typing-extensions` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> tuple[str, tuple[str, ...]]:
    match = _NAME.match(spec)
    if match is None:
        raise RequirementsError(f"cannot read the requirement {spec!r}")
    extras = tuple(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
    return canonical(match.group(1)), extras


def extra_requirements(extras: dict[str, list[str]], extra: str,
                       seen: frozenset[str] = frozenset()) -> list[str]:
    """The requirement strings of `extra`, with `hedgerow[other]` replaced by other's."""
    if extra not in extras:
        raise RequirementsError(f"pyproject.toml has no extra {extra!r} "
                                f"(it has {', '.join(sorted(extras))})")
    if extra in seen:
        raise RequirementsError(f"the extra {extra!r} includes itself")
    out: list[str] = []
    for spec in extras[extra]:
        name, inner = requirement_name(spec)
        if name == PROJECT:
            for other in inner:
                out += extra_requirements(extras, other, seen | {extra})
        elif spec not in out:
            out.append(spec)
    return out


def read_extras(pyproject: Path) -> dict[str, list[str]]:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RequirementsError(f"cannot read {pyproject}: {error}") from None
    extras = data.get("project", {}).get("optional-dependencies")
    if not isinstance(extras, dict):
        raise RequirementsError(f"{pyproject} has no [project.optional-dependencies]")
    return extras


def without(lines: list[str], provided: set[str]) -> list[str]:
    """`lines` (requirements or constraints) minus those naming a provided package."""
    kept = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text and not text.startswith("-") and requirement_name(text)[0] in provided:
            continue
        kept.append(line)
    return kept


def pinned_names(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if "==" in text and not text.startswith("-"):
            names.add(requirement_name(text)[0])
    return names


def write(pyproject: Path, constraints: Path, out_dir: Path, *, extra: str | None,
          package: str | None, provided: list[str]) -> tuple[Path, Path]:
    names = {canonical(name) for name in provided}
    wanted = extra_requirements(read_extras(pyproject), extra) if extra else [package or ""]
    try:
        pins = constraints.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RequirementsError(f"cannot read {constraints}: {error}") from None
    requirements = without(wanted, names)
    unpinned = sorted({requirement_name(spec)[0] for spec in requirements}
                      - pinned_names(pins))
    if unpinned:
        raise RequirementsError(f"{constraints.name} pins no version of {', '.join(unpinned)}: "
                                "an image would install whatever is newest (its header says "
                                "how to refresh the pins)")
    out_dir.mkdir(parents=True, exist_ok=True)
    requirements_path = out_dir / "requirements.txt"
    constraints_path = out_dir / "constraints.txt"
    requirements_path.write_text("\n".join(requirements) + "\n", encoding="utf-8")
    constraints_path.write_text("\n".join(without(pins, names)) + "\n", encoding="utf-8")
    return requirements_path, constraints_path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("constraints", type=Path)
    parser.add_argument("out_dir", type=Path)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--extra", help="an optional-dependencies extra of pyproject.toml")
    which.add_argument("--package", help="one package, at the version constraints.txt pins")
    parser.add_argument("--provided", action="append", default=[], metavar="NAME",
                        help="a package the base image brings; never installed or pinned")
    args = parser.parse_args(argv)
    try:
        paths = write(args.pyproject, args.constraints, args.out_dir, extra=args.extra,
                      package=args.package, provided=args.provided)
    except RequirementsError as error:
        print(f"requirements.py: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
