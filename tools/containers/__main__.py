"""Build, smoke-test and push Hedgerow's three images with whichever container tool is here.

Usage (the Makefile's `images`, `images-test` and `images-push` run these):
  python -P tools/containers build [--tool T] [--registry R] [--tag V]
                                   [--python-image I] [--torch-image I] [--flash-attn-spec S]
  python -P tools/containers test  [--tool T] [--python-image I] [--torch-image I]
                                   [--debian-mirror URL]
  python -P tools/containers push  [--tool T] [--registry R] [--tag V]

`build` tags R/hedgerow-{gateway,server,operator}:V (default ghcr.io/hedgerow, the chart's
appVersion), the names a chart install pulls. `test` builds them as
localhost/hedgerow-*:images-test, on the given bases when they can be had and on local
stand-ins built from the Debian archive when no registry serves them, then runs them
(smoke.py). An empty option means its default, so the Makefile can pass unset variables.
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import bases
import smoke
from builder import Builder, ContainerError, find_builder

ROOT = Path(__file__).resolve().parent.parent.parent
ROLES = ("operator", "gateway", "server")  # smallest first: a broken build fails sooner
BASE_ARG = {"operator": "PYTHON_IMAGE", "gateway": "PYTHON_IMAGE", "server": "TORCH_IMAGE"}
TEST_REGISTRY, TEST_TAG = "localhost", "images-test"


def dockerfile(role: str) -> Path:
    return ROOT / "images" / f"Dockerfile.{role}"


def default_base(arg: str) -> str:
    """The Dockerfiles' own default for a base-image build argument."""
    for role, name in BASE_ARG.items():
        if name == arg:
            match = re.search(rf"^ARG {arg}=(\S+)$", dockerfile(role).read_text(), re.M)
            if match:
                return match.group(1)
    raise ContainerError(f"no Dockerfile declares ARG {arg}=<default>")


def chart_version() -> str:
    text = (ROOT / "charts" / "hedgerow" / "Chart.yaml").read_text()
    match = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', text, re.M)
    if match is None:
        raise ContainerError("charts/hedgerow/Chart.yaml has no appVersion")
    return match.group(1)


def image_names(registry: str, tag: str) -> dict[str, str]:
    return {role: f"{registry.rstrip('/')}/hedgerow-{role}:{tag}" for role in ROLES}


def build_all(builder: Builder, names: dict[str, str], base_images: dict[str, str],
              flash_attn_spec: str = "", with_fa4: bool = True) -> None:
    """Build every image; `base_images` maps PYTHON_IMAGE/TORCH_IMAGE to an image (absent:
    the Dockerfile's default). `with_fa4` False leaves FlashAttention 4 out of the server."""
    for role in ROLES:
        args = {key: value for key, value in base_images.items() if key == BASE_ARG[role]}
        if role == "server" and flash_attn_spec:
            args["FLASH_ATTN_SPEC"] = flash_attn_spec
        if role == "server" and not with_fa4:
            args["FA4_SPEC"] = ""
        bases.say(f"building {names[role]} with {builder.name}")
        start = time.monotonic()
        command = builder.build_command(dockerfile(role), names[role], ROOT, args)
        if subprocess.run(command).returncode != 0:
            raise ContainerError(f"building {names[role]} failed (its log is above)")
        bases.say(f"built {names[role]} in {time.monotonic() - start:.0f} s")


def given_bases(args: argparse.Namespace) -> dict[str, str]:
    given = {"PYTHON_IMAGE": args.python_image, "TORCH_IMAGE": args.torch_image}
    return {key: value for key, value in given.items() if value}


def command_build(args: argparse.Namespace) -> None:
    builder = find_builder(args.tool)
    names = image_names(args.registry or "ghcr.io/hedgerow", args.tag or chart_version())
    build_all(builder, names, given_bases(args), args.flash_attn_spec)
    print("\n".join(names[role] for role in ROLES))


def command_test(args: argparse.Namespace) -> None:
    start = time.monotonic()
    builder = find_builder(args.tool, need_run=True)
    given = given_bases(args)
    resolved = {
        arg: bases.resolve(builder, given.get(arg) or default_base(arg), kind,
                           args.debian_mirror or "http://deb.debian.org/debian")
        for arg, kind in (("PYTHON_IMAGE", "python"), ("TORCH_IMAGE", "torch"))
    }
    names = image_names(TEST_REGISTRY, TEST_TAG)
    # The stand-in bases are CPU ones: FlashAttention 4 would be installed but never run.
    build_all(builder, names, resolved, with_fa4=False)
    built = time.monotonic()
    smoke.smoke_test(builder, names, Path(sys.executable).parent / "hedgerow")
    bases.say(f"images test passed: bases and builds {built - start:.0f} s, "
              f"smoke test {time.monotonic() - built:.0f} s")


def command_push(args: argparse.Namespace) -> None:
    builder = find_builder(args.tool)
    for name in image_names(args.registry or "ghcr.io/hedgerow",
                            args.tag or chart_version()).values():
        if not builder.exists(name):
            raise ContainerError(f"{name} is not built: run `make images` with the same "
                                 "IMAGE_REGISTRY and IMAGE_TAG first")
        bases.say(f"pushing {name}")
        if subprocess.run(builder.push_command(name)).returncode != 0:
            raise ContainerError(f"pushing {name} failed ({builder.name}'s message is above; "
                                 "is the registry logged in?)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/containers", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "test", "push"):
        sub = commands.add_parser(name)
        sub.add_argument("--tool", default="", help="docker, podman or buildah (default: the "
                         "first that works)")
        if name in ("build", "push"):
            sub.add_argument("--registry", default="", help="default ghcr.io/hedgerow")
            sub.add_argument("--tag", default="", help="default: the chart's appVersion")
        if name in ("build", "test"):
            sub.add_argument("--python-image", default="", help="gateway and operator base")
            sub.add_argument("--torch-image", default="", help="server base")
        if name == "build":
            sub.add_argument("--flash-attn-spec", default="", help="a flash-attn wheel")
        if name == "test":
            sub.add_argument("--debian-mirror", default="", help="for the stand-in bases")
    args = parser.parse_args(argv)
    try:
        {"build": command_build, "test": command_test, "push": command_push}[args.command](args)
    except (ContainerError, smoke.SmokeFailure) as error:
        print(f"tools/containers {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
