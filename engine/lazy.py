"""LazyTensor: a handle to a result that may still be on its way from the device.

On CUDA it holds a pinned host buffer, an asynchronous device-to-host copy queued on the
engine's stream behind the forward pass, and an event recorded after the copy: because the
stream is ordered, that one event means both "the forward pass finished" and "the bytes are in
host memory". `ready()` polls; `synchronize()` is the only call that blocks. On CPU the result
is complete when the handle is made.
"""

import torch


class LazyTensor:
    """Result of `Engine.step`: pooled embeddings, float32 [B, D], on the host."""

    def __init__(self, host: torch.Tensor, event: "torch.cuda.Event | None" = None) -> None:
        self._host = host
        self._event = event
        # A pinned buffer of the CUDA path: whoever keeps its rows past this handle copies them.
        self.pinned = event is not None

    @classmethod
    def completed(cls, value: torch.Tensor) -> "LazyTensor":
        """A handle whose value is already on the host (the CPU engine, eager fallbacks)."""
        return cls(value, None)

    @classmethod
    def copy_from_device(cls, device_value: torch.Tensor, stream: "torch.cuda.Stream") -> "LazyTensor":
        """Queue a non-blocking copy of `device_value` into pinned memory on `stream`."""
        host = torch.empty(device_value.shape, dtype=device_value.dtype, pin_memory=True)
        with torch.cuda.stream(stream):
            host.copy_(device_value, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        return cls(host, event)

    def ready(self) -> bool:
        """True once the result is in host memory; never blocks."""
        return self._event is None or self._event.query()

    def synchronize(self) -> torch.Tensor:
        """Block until the result is on the host and return it (float32 [B, D])."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host
