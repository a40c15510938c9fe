"""DESIGN.md's import rules, checked on the source: each subpackage imports only what it may."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> top-level modules or hedgerow subpackages it must not import
FORBIDDEN = {
    "engine": {"grpc", "fastapi", "starlette", "uvicorn", "hedgerow.server", "hedgerow.gateway",
               "hedgerow.operator", "kopf"},
    "kernels": {"hedgerow"},
    "server": {"fastapi", "starlette", "uvicorn", "hedgerow.gateway", "hedgerow.operator", "kopf"},
    "gateway": {"torch", "triton", "hedgerow.engine", "hedgerow.kernels", "hedgerow.server",
                "hedgerow.operator", "kopf"},
    "operator": {"torch", "triton", "grpc", "fastapi", "hedgerow.engine", "hedgerow.kernels",
                 "hedgerow.server", "hedgerow.gateway"},
    "wire": {"torch", "fastapi", "hedgerow.engine", "hedgerow.server", "hedgerow.gateway"},
    # The base package is what every process imports: the settings, the graph grid and the
    # /warmup contract that the operator reads too. (Its commands/ are the CLI's subcommands,
    # which load what they run.)
    "hedgerow": {"torch", "triton", "grpc", "fastapi", "starlette", "uvicorn", "kopf",
                 "kubernetes", "hedgerow.engine", "hedgerow.kernels", "hedgerow.server",
                 "hedgerow.gateway", "hedgerow.operator", "hedgerow.wire"},
}
SUBCOMMANDS = ROOT / "hedgerow" / "commands"


def imported_modules(path: Path, package: str = "") -> set[str]:
    """Absolute names of what `path` imports: `import`, `from`, relative imports resolved
    against `package` (the file's own package), and `importlib.import_module("...")` or
    `__import__("...")` with a literal name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            if node.module:
                names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and _call_name(node.func) in DYNAMIC_IMPORTS
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


DYNAMIC_IMPORTS = {"import_module", "importlib.import_module", "__import__"}


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


def package_of(path: Path) -> str:
    """hedgerow.<folder>[.<sub>...] for a file under ROOT/<folder>/."""
    folders = path.relative_to(ROOT).parent.parts
    return ".".join(("hedgerow",) + folders)


def violates(module: str, forbidden: str, own: str = "") -> bool:
    if own and (module == own or module.startswith(own + ".")):
        return False  # a package may always import its own modules
    return module == forbidden or module.startswith(forbidden + ".")


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_folder_respects_its_import_rules(folder):
    violations = []
    own = f"hedgerow.{folder}"
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.is_relative_to(SUBCOMMANDS):
            continue
        for module in imported_modules(path, package_of(path)):
            for forbidden in FORBIDDEN[folder]:
                if violates(module, forbidden, own):
                    violations.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not violations, "\n".join(violations)


def test_the_checker_catches_a_violation(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from hedgerow.engine.pooling import pool\nimport torch.nn\n")
    found = imported_modules(sample)
    assert any(violates(m, "hedgerow.engine") for m in found)
    assert any(violates(m, "torch") for m in found)
    assert not any(violates(m, "hedgerow.server") for m in found)


def test_the_checker_sees_relative_and_dynamic_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from ..engine import pooling\nfrom .. import server\n"
                      "from . import chunking\nimport importlib\n"
                      "importlib.import_module('torch')\n__import__('triton')\n")
    found = imported_modules(sample, "hedgerow.gateway")
    assert {"hedgerow.engine.pooling", "hedgerow.server", "hedgerow.gateway.chunking", "torch",
            "triton"} <= found
    assert not violates("hedgerow.kernels.topk", "hedgerow", own="hedgerow.kernels")
    assert violates("hedgerow.engine", "hedgerow", own="hedgerow.kernels")
