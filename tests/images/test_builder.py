"""tools/containers/builder.py: which container tool `make images` picks."""

from pathlib import Path

import pytest


def fake_tools(folder: Path, working: dict[str, bool]) -> None:
    """Executables named like container tools that succeed or fail at everything."""
    folder.mkdir()
    for name, works in working.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\nexit {0 if works else 1}\n")
        path.chmod(0o755)


@pytest.mark.parametrize("working, need_run, picked", [
    # A docker client whose daemon does not answer is passed over.
    ({"docker": False, "podman": True, "buildah": True}, False, "podman"),
    ({"docker": True, "podman": True}, False, "docker"),
    ({"buildah": True}, False, "buildah"),
])
def test_the_first_tool_that_works_is_picked(builder_module, tmp_path, monkeypatch, working,
                                             need_run, picked):
    fake_tools(tmp_path / "bin", working)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert builder_module.find_builder(need_run=need_run).name == picked


def test_a_tool_that_cannot_serve_is_refused_by_name(builder_module, tmp_path, monkeypatch):
    fake_tools(tmp_path / "bin", {"docker": False, "buildah": True})
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    error = builder_module.ContainerError
    with pytest.raises(error, match="no container tool works here"):
        builder_module.find_builder(need_run=True)
    with pytest.raises(error, match="buildah cannot run containers"):
        builder_module.find_builder("buildah", need_run=True)
    with pytest.raises(error, match=r"docker does not work here \(`docker info` failed\)"):
        builder_module.find_builder("docker")
    with pytest.raises(error, match="unknown container tool 'kaniko'"):
        builder_module.find_builder("kaniko")
    with pytest.raises(error, match="buildah cannot run containers"):
        builder_module.Builder("buildah").run_command("image", [])
