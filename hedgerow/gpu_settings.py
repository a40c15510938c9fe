"""The engine's settings for CUDA devices: graphs, bucket grid, hot set, attention, compile.

Plain data in the base package, so the server builds its flags from it without importing the
CUDA step path (which pulls in torch.compile's machinery), and the operator generates the CRD's
schema and the server pods' environment from the same definitions. The grid's defaults are
`GraphGrid`'s own: one definition of the bucket grid.
"""

from dataclasses import dataclass
from pathlib import Path

from hedgerow.graph_grid import Config, GraphGrid, parse_hot_set
from hedgerow.settings import setting

# The ragged CUDA attention backends a user can force (engine/attention_cuda.py), in preference
# order; the uniform-only cuDNN kernel is chosen by the measured table alone.
ATTENTION_BACKENDS = ("varlen", "fa4", "flash_attn", "triton", "sdpa")
# Both lists are walked by the CRD's CEL rules, whose cost the API server bounds up front.
MAX_SEQ_BUCKETS = 64
MAX_HOT_SET = 64


@dataclass(frozen=True)
class GpuSettings:
    """Engine settings for CUDA devices; every field is a flag and an environment variable."""

    graphs: bool = setting(True, "Capture CUDA graphs (off: every step runs eagerly, slower "
                                 "at small batches).")
    graph_max_tokens: int = setting(
        GraphGrid.max_tokens, "Largest token bucket with a graph; bigger batches run eagerly. "
        f"Buckets are multiples of {GraphGrid.small_step} up to {GraphGrid.switch}, then of "
        f"{GraphGrid.large_step}.", unit="tokens", minimum=GraphGrid.small_step, maximum=1048576)
    graph_max_seqs: int = setting(GraphGrid.max_seqs,
                                  "Most sequences in a batch that runs in a graph.",
                                  unit="sequences", minimum=1, maximum=4096)
    graph_seq_buckets: tuple[int, ...] = setting(
        GraphGrid.seq_buckets,
        "Sequence-count buckets, increasing (the last must equal --graph-max-seqs); empty "
        "means one graph per exact count, which multiplies the grid.",
        minimum=1, maximum=4096, max_items=MAX_SEQ_BUCKETS)
    graph_hot_set: tuple[str, ...] = setting(
        ("1x64", "1x128", "1x192", "1x256", "1x384", "1x512"),
        "Configurations SEQSxTOKENS captured before the server reports ready (each costs a "
        "capture, tens of ms, and graph memory).", max_items=MAX_HOT_SET)
    graph_memory_limit_mib: int = setting(
        8192, "Most device memory the graphs and their static buffers may hold; past it, "
        "configurations stay eager.", unit="MiB", minimum=0, maximum=1048576)
    attention_backend: str = setting(
        "auto", "CUDA attention: auto picks per configuration from the measured table (cuDNN "
        "only for batches whose sequences share one length); a name forces that ragged "
        "kernel everywhere.", choices=("auto",) + ATTENTION_BACKENDS)
    gelu_epilogue: bool = setting(
        True, "Run each up projection and its GELU as one cuBLASLt product (a GELU epilogue, "
        "the tanh approximation: exact for gelu_new / gelu_pytorch_tanh models, an "
        "approximation for exact-gelu ones such as BERT and XLM-R, whose vectors it moves "
        "within bf16's own noise: measured on an H200, BGE-M3's minimum cosine against "
        "float32 transformers stayed 0.99996, 1x4096 8.49 -> 7.95 ms, 100x512 1,453 -> 1,651 emb/s). Off: the "
        "model's own GELU, one more pass over the widest activation per layer.")
    quack_mlp: bool = setting(
        True, "Let QuACK's fused GEMMs (quack-kernels, Hopper and newer) run the MLP's up "
        "product with its activation where they measured faster on an H200: SwiGLU (Qwen3) "
        "from 512 tokens a batch, GELU (with --gelu-epilogue) from 4,096; cuBLAS below, and "
        "everywhere when the package does not import. Same function either way (QuACK's "
        "epilogue computes in float32). Off: cuBLAS always.")
    compile: bool = setting(
        True, "Compile the forward pass with torch.compile (Inductor) under the graphs: fused "
        "norms, RoPE, activations and residual adds (measured on an H200: Qwen3-0.6B 1x128 "
        "2.77 -> 1.61 ms, BGE-M3 1.36 -> 1.09 ms), at the cost of one compile at start (30-45 s "
        "for those models). Batches past the graph grid run uncompiled.")
    compile_mode: str = setting(
        "default", "torch.compile's mode for --compile. max-autotune-no-cudagraphs also times "
        "Inductor's matrix-product templates (Triton, split-K and persistent among them) "
        "against cuBLAS when it compiles and keeps the fastest, at a much longer first compile "
        "(keep it with --compile-cache); measured on an H200 it made BGE-M3 slower (1x128 "
        "1.08 -> 1.49 ms, compile 31 -> 86 s), so try it per model. Either way the server "
        "captures the CUDA graphs itself.",
        choices=("default", "max-autotune-no-cudagraphs"))
    compile_cache: Path | None = setting(
        None, "Directory that keeps what --compile compiled (Inductor's graphs and autotuning, "
        "Triton's kernels) and FlashAttention 4's kernels across starts: a server that finds its compile there reuses it "
        "instead of building it again (the model is still traced at each start). Give every "
        "replica the same volume and a new one reuses it too. Unset: torch's default under "
        "/tmp, which lasts as long as the container's /tmp.")

    def grid(self) -> GraphGrid:
        return GraphGrid(max_tokens=self.graph_max_tokens, max_seqs=self.graph_max_seqs,
                         seq_buckets=self.graph_seq_buckets)

    def hot_set(self) -> list[Config]:
        """The hot-set configurations on this grid (raises ConfigError naming a bad entry)."""
        return parse_hot_set(self.graph_hot_set, self.grid())
