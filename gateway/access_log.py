"""The gateway's access log: one line per answered request, or a sampled fraction of them.

Owns the line (`event=access method=POST route=/v1/embeddings status=200 tokens=11 ms=1.234`,
or the same keys in JSON under --log-format json) and the sampling (--access-log-sample): a
request is logged with that probability, so a busy gateway can keep a representative trickle.
Routes are logged as registered (`/v1/models/{model}`), never with the client's path, so a line
holds no request data. Knows nothing about HTTP or routing beyond those five values.
"""

import logging
import random

from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.access")


class AccessLog:
    """`record` writes a request's line with probability `sample` (0 never, 1 always)."""

    def __init__(self, sample: float) -> None:
        self._sample = sample
        # Decided once: a level above INFO switches the log off without a check per request.
        self._on = sample > 0 and log.isEnabledFor(logging.INFO)

    def record(self, method: str, route: str, status: int, tokens: int, seconds: float) -> None:
        if not self._on or (self._sample < 1 and random.random() >= self._sample):
            return
        log.info("%s", fields(event="access", method=method, route=route, status=status,
                              tokens=tokens, ms=round(seconds * 1000, 3)))
