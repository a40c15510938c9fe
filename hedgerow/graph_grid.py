"""The CUDA-graph bucket grid: which configuration a batch of a given shape runs in.

Owns the grid arithmetic and nothing else: token buckets are multiples of `small_step` (64) up
to `switch` (1024), then multiples of `large_step` (256) up to `max_tokens`; sequence counts are
bucketed (`seq_buckets`) or exact (`seq_buckets=()`, one graph per count up to `max_seqs`).
It also owns the spelling of a hot-set shape, `SEQSxTOKENS`. Plain arithmetic with no torch, so
the engine's graph cache, the server's settings and the operator's CRD all use this one rule.

Beside the grid there are uniform configurations: exactly `S` sequences of one length `L`
(`tokens = S * L`, nothing padded), for attention kernels that need a dense block of equal
lengths. The engine makes them only for batches whose sequences all share one length and only
where such a kernel measured faster; they are off the grid and never in the hot set.
"""

import bisect
import dataclasses
from typing import Iterable, NamedTuple

from hedgerow.errors import ConfigError


class Config(NamedTuple):
    """One graph: `seq_slots` real-sequence slots (plus one padding slot) and `tokens` tokens;
    with `uniform` > 0, exactly `seq_slots` sequences of `uniform` tokens each."""

    seq_slots: int
    tokens: int
    uniform: int = 0

    def __str__(self) -> str:
        shape = format_shape(self.seq_slots, self.tokens)
        return f"{shape}u" if self.uniform else shape

    @classmethod
    def dense(cls, sequences: int, length: int) -> "Config":
        """The uniform configuration of `sequences` sequences of `length` tokens."""
        return cls(sequences, sequences * length, length)


@dataclasses.dataclass(frozen=True)
class GraphGrid:
    """The bucket grid. Its defaults are the engine settings' defaults (hedgerow.gpu_settings)."""

    small_step: int = 64
    switch: int = 1024
    large_step: int = 256
    max_tokens: int = 8192
    max_seqs: int = 64
    # Sequence-count buckets; () means exact counts 1..max_seqs (one graph per count).
    seq_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)

    def __post_init__(self) -> None:
        if self.small_step <= 0 or self.large_step <= 0:
            raise ConfigError("graph token bucket steps must be positive")
        if self.switch % self.small_step:
            raise ConfigError(
                f"graph bucket switch {self.switch} must be a multiple of the small step "
                f"{self.small_step}"
            )
        if self.max_tokens < self.small_step:
            raise ConfigError(
                f"graph max tokens {self.max_tokens} is below the smallest bucket "
                f"{self.small_step}; raise --graph-max-tokens"
            )
        if not self.on_token_grid(self.max_tokens):
            raise ConfigError(
                f"graph max tokens {self.max_tokens} must be a multiple of {self.small_step} up "
                f"to {self.switch}, then {self.switch} plus a multiple of {self.large_step}"
            )
        if self.max_seqs < 1:
            raise ConfigError("graph max sequences must be at least 1")
        if self.seq_buckets:
            if list(self.seq_buckets) != sorted(set(self.seq_buckets)) or self.seq_buckets[0] < 1:
                raise ConfigError(
                    f"graph sequence buckets {self.seq_buckets} must be increasing positive "
                    "integers"
                )
            if self.seq_buckets[-1] != self.max_seqs:
                raise ConfigError(
                    f"the last graph sequence bucket ({self.seq_buckets[-1]}) must equal the "
                    f"graph max sequences ({self.max_seqs})"
                )

    def on_token_grid(self, tokens: int) -> bool:
        """Whether `tokens` is itself a bucket boundary (what max_tokens must be)."""
        if tokens <= self.switch:
            return tokens % self.small_step == 0
        return (tokens - self.switch) % self.large_step == 0

    def token_buckets(self) -> list[int]:
        small = list(range(self.small_step, min(self.switch, self.max_tokens) + 1, self.small_step))
        large = list(range(self.switch + self.large_step, self.max_tokens + 1, self.large_step))
        return small + large

    def seq_slot_counts(self) -> list[int]:
        return list(self.seq_buckets) if self.seq_buckets else list(range(1, self.max_seqs + 1))

    def token_bucket(self, num_tokens: int) -> int | None:
        """Smallest bucket holding `num_tokens`, or None past `max_tokens`."""
        if num_tokens < 1 or num_tokens > self.max_tokens:
            return None
        if num_tokens <= self.switch:
            return -(-num_tokens // self.small_step) * self.small_step
        return self.switch + -(-(num_tokens - self.switch) // self.large_step) * self.large_step

    def seq_slots(self, num_seqs: int) -> int | None:
        if num_seqs < 1 or num_seqs > self.max_seqs:
            return None
        if not self.seq_buckets:
            return num_seqs
        return self.seq_buckets[bisect.bisect_left(self.seq_buckets, num_seqs)]

    def config_for(self, num_seqs: int, num_tokens: int) -> Config | None:
        """The configuration a batch runs in, or None when it is past the grid (eager)."""
        slots = self.seq_slots(num_seqs)
        tokens = self.token_bucket(num_tokens)
        if slots is None or tokens is None:
            return None
        return Config(slots, tokens)

    def uniform_for(self, num_seqs: int, length: int) -> Config | None:
        """The uniform configuration of `num_seqs` sequences of `length` tokens, or None when
        it is past the grid's limits or holds one sequence (a ragged graph serves those)."""
        if num_seqs < 2 or num_seqs > self.max_seqs or length < 1:
            return None
        if num_seqs * length > self.max_tokens:
            return None
        return Config.dense(num_seqs, length)

    def size(self) -> int:
        """Configurations on the grid (uniform ones are off it)."""
        return len(self.seq_slot_counts()) * len(self.token_buckets())


def format_shape(sequences: int, tokens: int) -> str:
    """A hot-set shape as flags and variables spell it: `SEQSxTOKENS`, e.g. `1x128`."""
    return f"{sequences}x{tokens}"


def parse_shape(entry: str) -> tuple[int, int]:
    """(sequences, tokens) of a hot-set entry `SEQSxTOKENS`; raises ConfigError naming it."""
    seqs, sep, tokens = entry.strip().lower().partition("x")
    if not sep or not seqs.isdigit() or not tokens.isdigit():
        raise ConfigError(f"graph hot set entry {entry!r} must look like SEQSxTOKENS, e.g. 1x128")
    return int(seqs), int(tokens)


def parse_hot_set(spec: Iterable[str], grid: GraphGrid) -> list[Config]:
    """Parse hot-set entries `SEQSxTOKENS` (e.g. `1x128`) into distinct configurations.

    Raises ConfigError naming the entry when it is malformed or past the grid.
    """
    configs: list[Config] = []
    for entry in spec:
        num_seqs, num_tokens = parse_shape(entry)
        if num_seqs < 1:
            raise ConfigError(f"graph hot set entry {entry!r} needs at least one sequence")
        if num_tokens < num_seqs:
            raise ConfigError(
                f"graph hot set entry {entry!r} has fewer tokens than sequences"
            )
        config = grid.config_for(num_seqs, num_tokens)
        if config is None:
            raise ConfigError(
                f"graph hot set entry {entry!r} is past the grid (at most {grid.max_seqs} "
                f"sequences and {grid.max_tokens} tokens); raise --graph-max-seqs or "
                "--graph-max-tokens, or drop the entry"
            )
        if config not in configs:
            configs.append(config)
    return configs
