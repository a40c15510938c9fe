"""Stop the server image's build when the base image's torch cannot run the engine.

Usage: python -P check_base_torch.py

The server image keeps the torch its base image brings (a CUDA build: a pinned CPU wheel
would replace it). The engine's GPU attention is torch.nn.attention.varlen, which torch 2.10
and later have, so an older base is refused here, with the import's own error, rather than
when the first pod starts. Run with -P and away from the sources: a copied `operator/`
folder on sys.path would shadow the standard library's `operator` and break `import torch`.
"""

import sys

DEFAULT = "pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime"


def main() -> int:
    try:
        import torch
    except ImportError as error:
        print(f"TORCH_IMAGE has no torch that imports ({error}): build on a PyTorch image "
              f"such as {DEFAULT}", file=sys.stderr)
        return 1
    try:
        import torch.nn.attention.varlen  # noqa: F401  (present is all we check)
    except ImportError as error:
        print(f"TORCH_IMAGE's torch {torch.__version__} lacks torch.nn.attention.varlen "
              f"({error}), which the engine's GPU attention needs: use torch 2.10 or later, "
              f"such as {DEFAULT}", file=sys.stderr)
        return 1
    print(f"TORCH_IMAGE's torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}) has "
          "torch.nn.attention.varlen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
