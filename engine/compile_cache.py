"""Where torch.compile keeps what it compiled, so that a later start can reuse it.

A server compiles its forward pass at start (30-45 s for BGE-M3 or Qwen3-0.6B on a GPU, most of
a cold start). Inductor caches the graphs it generated and its autotuning results, Triton the
kernels it built, FlashAttention 4 and QuACK their CuTe kernels, each under a directory named by
an environment variable that each reads when it compiles (FlashAttention 4 and QuACK: when they
are imported). `use(directory)` points them all at `directory`, so that a server restarted on
the same volume, or a new replica given the same one, finds its compile there instead of doing
it again (the cache keys include the model's graph, torch's and Triton's versions and the
device, so a stale entry is never used, only missed). Knows nothing about models or serving.
"""

import os
from pathlib import Path

from hedgerow.errors import ConfigError

INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
TRITON_ENV = "TRITON_CACHE_DIR"
# FlashAttention 4 (CuTe DSL) compiles each kernel variant on first use (1.5 to 2.6 s) and keeps
# it on disk only when asked; it reads these when `flash_attn.cute` is imported.
FA4_CACHE_ON_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"
FA4_CACHE_DIR_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"
# QuACK's GEMMs (cuda_linear.py) likewise, read when `quack` is imported.
QUACK_CACHE_DIR_ENV = "QUACK_CACHE_DIR"


def use(directory: Path) -> None:
    """Make `directory` (created if missing) hold Inductor's and Triton's caches from now on;
    ConfigError when it cannot be created or written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--compile-cache {directory}: cannot create it "
                          f"({error.strerror})") from None
    if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"--compile-cache {directory}: not a directory this process can "
                          "write (a volume mounted read-only, or owned by another user?)")
    os.environ[INDUCTOR_ENV] = str(directory / "inductor")
    os.environ[TRITON_ENV] = str(directory / "triton")
    os.environ[FA4_CACHE_ON_ENV] = "1"
    os.environ[FA4_CACHE_DIR_ENV] = str(directory / "flash-attn-cute")
    os.environ[QUACK_CACHE_DIR_ENV] = str(directory / "quack")
