"""Which container tool builds and runs here, and the command lines each one takes.

Owns the differences between docker, podman and buildah: finding one that works (a docker
client without a daemon does not), building with the options each needs, running a hardened
container, inspecting, pulling and pushing. Knows nothing about Hedgerow's images.
"""

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KNOWN = ("docker", "podman", "buildah")
# Only these can run the smoke test's containers; buildah builds and pushes only.
RUNNERS = ("docker", "podman")


class ContainerError(Exception):
    """A container tool is missing or failed; the message says which and what to do."""


@dataclass(frozen=True)
class Builder:
    name: str

    @property
    def can_run(self) -> bool:
        return self.name in RUNNERS

    def build_command(self, dockerfile: Path, tag: str, context: Path,
                      build_args: dict[str, str]) -> list[str]:
        args = [f"--build-arg={key}={value}" for key, value in sorted(build_args.items())]
        if self.name == "docker":
            return ["docker", "build", "-f", str(dockerfile), "-t", tag, *args, str(context)]
        # Docker's image format, because the OCI format has no HEALTHCHECK; chroot isolation,
        # because it builds where runc cannot start a container (inside another container).
        return [self.name, "build", "--format=docker", "--layers", "--isolation=chroot",
                "-f", str(dockerfile), "-t", tag, *args, str(context)]

    def hardened_run_options(self) -> list[str]:
        """`run` options for a container as the chart runs one: read-only root filesystem
        (a tmpfs at /tmp for HOME), every capability dropped, no privilege gain, host
        network so that the test reaches it on loopback."""
        options = ["--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                   "--network=host"]
        if self.name == "docker":
            return options + ["--tmpfs=/tmp"]  # podman mounts one with --read-only already
        # podman raises a container's open-file and process limits to its own defaults,
        # which a host without CAP_SYS_RESOURCE refuses; these fit under such hosts' limits
        # and are plenty. runc with cgroupfs runs on cgroup v1 hosts, where crun does not.
        return options + ["--ulimit=nofile=16384:16384", "--ulimit=nproc=32768:32768",
                          "--runtime=runc", "--cgroup-manager=cgroupfs"]

    def run_command(self, image: str, args: list[str], *, name: str | None = None,
                    env: dict[str, str] | None = None, detach: bool = False,
                    entrypoint: str | None = None) -> list[str]:
        if not self.can_run:
            raise ContainerError(f"{self.name} cannot run containers: install podman or docker")
        command = [self.name, "run", *self.hardened_run_options()]
        command += ["--detach"] if detach else ["--rm"]
        if name:
            command += ["--name", name]
        if entrypoint is not None:
            command += ["--entrypoint", entrypoint]
        for key, value in sorted((env or {}).items()):
            command += ["-e", f"{key}={value}"]
        return command + [image, *args]

    def exec_command(self, container: str, args: list[str]) -> list[str]:
        return [self.name, "exec", container, *args]

    def image_config(self, image: str) -> dict:
        """The image's config (User, Env, Healthcheck, ...); {} when it does not exist."""
        command = [self.name, "inspect", "--type=image", image]
        if self.name == "buildah":
            command = ["buildah", "inspect", "--type=image", image]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            return {}
        data = json.loads(result.stdout)
        if self.name == "buildah":
            return data.get("Docker", {}).get("config") or data.get("OCIv1", {}).get("config", {})
        if not data:
            return {}
        config = dict(data[0].get("Config") or {})
        # podman shows an image's HEALTHCHECK beside its config, docker inside it.
        if "Healthcheck" in data[0]:
            config.setdefault("Healthcheck", data[0]["Healthcheck"])
        return config

    def exists(self, image: str) -> bool:
        return bool(self.image_config(image))

    def pull(self, image: str) -> bool:
        """Pull `image`; False when no registry serves it (offline, say)."""
        return subprocess.run([self.name, "pull", image], capture_output=True).returncode == 0

    def push_command(self, image: str) -> list[str]:
        return [self.name, "push", image]


def _works(name: str) -> bool:
    if shutil.which(name) is None:
        return False
    # `docker version` succeeds without a daemon for the client part; `info` needs one.
    probe = [name, "info"] if name == "docker" else [name, "--version"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def find_builder(wanted: str = "", *, need_run: bool = False) -> Builder:
    """The tool named `wanted`, else the first of docker (with a daemon), podman, buildah that
    works; `need_run` skips buildah."""
    if wanted:
        if wanted not in KNOWN:
            raise ContainerError(f"unknown container tool {wanted!r}: use one of "
                                 f"{', '.join(KNOWN)}")
        if not _works(wanted):
            raise ContainerError(f"{wanted} does not work here (`{wanted} "
                                 f"{'info' if wanted == 'docker' else '--version'}` failed)")
        if need_run and wanted not in RUNNERS:
            raise ContainerError(f"{wanted} cannot run containers: use podman or docker")
        return Builder(wanted)
    for name in RUNNERS if need_run else KNOWN:
        if _works(name):
            return Builder(name)
    raise ContainerError(
        "no container tool works here: install docker (with a running daemon), podman or "
        "buildah; on Debian or Ubuntu `make images-tools` installs podman and buildah")
