"""Regenerate the committed gRPC stubs in wire/ from wire/embed.proto.

Usage: python tools/gen_proto.py [OUTPUT_DIR]   (default wire/; created when missing)

The stubs are committed so that no install step needs protoc; tests/wire/test_stubs_current.py
regenerates them into a temporary folder and fails when the committed ones differ.
The .proto is compiled from a temporary `hedgerow/wire/` tree so the generated imports read
`from hedgerow.wire import embed_pb2`.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ["embed.proto"]
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src" / "hedgerow" / "wire"
        dst = Path(tmp) / "out"
        src.mkdir(parents=True)
        dst.mkdir()
        for name in PROTOS:
            shutil.copy(ROOT / "wire" / name, src / name)
            args = [
                "protoc",
                f"-I{Path(tmp) / 'src'}",
                f"--python_out={dst}",
                f"--pyi_out={dst}",
                f"--grpc_python_out={dst}",
                f"hedgerow/wire/{name}",
            ]
            if protoc.main(args) != 0:
                raise SystemExit(f"protoc failed on {name}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted((dst / "hedgerow" / "wire").iterdir()):
            if path.name.endswith(GENERATED_SUFFIXES):
                target = out_dir / path.name
                shutil.copy(path, target)
                written.append(target)
        return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "wire"
    for path in generate(out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
