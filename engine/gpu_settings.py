"""The engine's settings for CUDA devices: graphs, bucket grid, hot set, attention, compile.

Kept apart from engine/gpu.py so the server can build its flags and read them without
importing the CUDA step path (which pulls in torch.compile's machinery at import).
"""

from dataclasses import dataclass

from hedgerow.engine.graphs import Config, GraphGrid, parse_hot_set
from hedgerow.errors import ConfigError
from hedgerow.settings import setting


@dataclass(frozen=True)
class GpuSettings:
    """Engine settings for CUDA devices; every field is a flag and an environment variable."""

    graphs: bool = setting(True, "Capture CUDA graphs (off: every step runs eagerly, slower "
                                 "at small batches).")
    graph_max_tokens: int = setting(
        8192, "Largest token bucket with a graph; bigger batches run eagerly. Buckets are "
        "multiples of 64 up to 1024, then of 256.", unit="tokens", minimum=64)
    graph_max_seqs: int = setting(64, "Most sequences in a batch that runs in a graph.",
                                  unit="sequences", minimum=1)
    graph_seq_buckets: tuple[str, ...] = setting(
        ("1", "2", "4", "8", "16", "32", "64"),
        "Sequence-count buckets (the last must equal --graph-max-seqs); empty means one graph "
        "per exact count, which multiplies the grid.")
    graph_hot_set: tuple[str, ...] = setting(
        ("1x64", "1x128", "1x192", "1x256", "1x384", "1x512"),
        "Configurations SEQSxTOKENS captured before the server reports ready (each costs a "
        "capture, tens of ms, and graph memory).")
    graph_memory_limit_mib: int = setting(
        8192, "Most device memory the graphs and their static buffers may hold; past it, "
        "configurations stay eager.", unit="MiB", minimum=0)
    attention_backend: str = setting(
        "auto", "CUDA ragged attention: auto picks per configuration from the measured table.",
        choices=("auto", "varlen", "flash_attn", "sdpa"))
    compile: bool = setting(
        True, "Compile the forward pass with torch.compile (Inductor) under the graphs: fused "
        "norms, RoPE, activations and residual adds (measured on an H200: Qwen3-0.6B 1x128 "
        "2.77 -> 1.61 ms, BGE-M3 1.36 -> 1.09 ms), at the cost of one compile at start (30-45 s "
        "for those models). Batches past the graph grid run uncompiled.")

    def grid(self) -> GraphGrid:
        try:
            buckets = tuple(int(b) for b in self.graph_seq_buckets)
        except ValueError:
            raise ConfigError(f"--graph-seq-buckets {','.join(self.graph_seq_buckets)}: "
                              "every entry must be an integer") from None
        return GraphGrid(max_tokens=self.graph_max_tokens, max_seqs=self.graph_max_seqs,
                         seq_buckets=buckets)

    def hot_set(self) -> list[Config]:
        """The hot-set configurations on this grid (raises ConfigError naming a bad entry)."""
        return parse_hot_set(self.graph_hot_set, self.grid())
