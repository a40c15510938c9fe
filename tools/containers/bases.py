"""The base images the Dockerfiles build FROM: the real ones when a registry serves them,
local stand-ins built from the Debian archive when none does.

A stand-in gives the Dockerfiles what they ask of a base and nothing else: Debian bookworm
(from `debootstrap --variant=minbase`, committed FROM scratch), Python 3.11 with pip as
`python` on PATH, like python:3.11-slim-bookworm; and for the server, that plus CPU torch
2.13.0 and the CUDA base's cuda-bindings, like pytorch/pytorch with its CUDA build. They serve
the smoke test on a machine that reaches PyPI and the Debian archive but no container registry.
Owns nothing else: which images to build and how to test them live beside it.
"""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from builder import Builder, ContainerError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORK = ROOT / "build" / "images"
STANDIN_PYTHON = "localhost/hedgerow-standin-python:3.11-bookworm"
# The torch the stand-in carries: the CPU build the Makefile installs, fetched the same way; and
# the CUDA packages that the default TORCH_IMAGE's torch (2.11.0, CUDA 13.0) brings with it.
TORCH_CPU = "torch==2.13.0"
CUDA_PACKAGES = ("cuda-bindings==13.3.1", "cuda-pathfinder==1.8.1")
# The tag names what the stand-in holds, so a store keeping an older stand-in builds this one.
STANDIN_TORCH = "localhost/hedgerow-standin-torch:2.13.0-cpu-cuda-bindings-13.3.1"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates")


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def run(command: list[str], **kwargs) -> None:
    result = subprocess.run(command, **kwargs)
    if result.returncode != 0:
        raise ContainerError(f"`{' '.join(command[:4])} ...` failed with status "
                             f"{result.returncode}")


def available(builder: Builder, image: str) -> bool:
    """True when `image` is here already or a registry serves it."""
    if builder.exists(image):
        return True
    say(f"pulling {image}")
    return builder.pull(image)


def resolve(builder: Builder, image: str, kind: str, mirror: str) -> str:
    """`image` if it can be had, else the stand-in for `kind` ("python" or "torch")."""
    if available(builder, image):
        return image
    say(f"no registry serves {image}: using a local stand-in")
    return python_standin(builder, mirror) if kind == "python" else torch_standin(builder,
                                                                                   mirror)


def python_standin(builder: Builder, mirror: str) -> str:
    if builder.exists(STANDIN_PYTHON):
        return STANDIN_PYTHON
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        raise ContainerError("building the stand-in base needs debootstrap, run as root "
                             "(`make images-tools` installs it); or pass PYTHON_IMAGE and "
                             "TORCH_IMAGE naming images that are here")
    context = WORK / "standin-python"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    rootfs = context / "rootfs"
    say(f"debootstrap {DEBIAN_SUITE} from {mirror} (about a minute)")
    run(["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
         DEBIAN_SUITE, str(rootfs), mirror], stdout=subprocess.DEVNULL)
    with tarfile.open(context / "rootfs.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
    shutil.rmtree(rootfs)
    # pip in the stand-in must trust what pip here trusts (a proxy's CA, say).
    bundle = Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
                  or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise ContainerError(f"no CA bundle at {bundle}: set PIP_CERT to the one pip uses")
    shutil.copyfile(bundle, context / "ca-certificates.crt")
    say(f"building {STANDIN_PYTHON}")
    run(builder.build_command(HERE / "standin-python.Containerfile", STANDIN_PYTHON, context,
                              {}))
    shutil.rmtree(context)
    return STANDIN_PYTHON


def torch_standin(builder: Builder, mirror: str) -> str:
    if builder.exists(STANDIN_TORCH):
        return STANDIN_TORCH
    python = python_standin(builder, mirror)
    context = WORK / "standin-torch"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    say(f"fetching the {TORCH_CPU} wheel as `make setup` does")
    run([sys.executable, "-P", "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", "--dest", str(context), TORCH_CPU])
    shutil.copyfile(ROOT / "constraints.txt", context / "constraints.txt")
    say(f"building {STANDIN_TORCH}")
    run(builder.build_command(HERE / "standin-torch.Containerfile", STANDIN_TORCH, context,
                              {"PYTHON_IMAGE": python,
                               "CUDA_PACKAGES": " ".join(CUDA_PACKAGES)}))
    shutil.rmtree(context)
    return STANDIN_TORCH
