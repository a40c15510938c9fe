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
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def violates(module: str, forbidden: str) -> bool:
    return module == forbidden or module.startswith(forbidden + ".")


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_folder_respects_its_import_rules(folder):
    violations = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in imported_modules(path):
            for forbidden in FORBIDDEN[folder]:
                if violates(module, forbidden):
                    violations.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not violations, "\n".join(violations)


def test_the_checker_catches_a_violation(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from hedgerow.engine.pooling import pool\nimport torch.nn\n")
    found = imported_modules(sample)
    assert any(violates(m, "hedgerow.engine") for m in found)
    assert any(violates(m, "torch") for m in found)
    assert not any(violates(m, "hedgerow.server") for m in found)
