"""The gateway's access log: one line per answered request, or a sampled fraction of them.

Owns the line (`event=access request_id=... method=POST route=/v1/embeddings status=200
tokens=11 ms=1.234 client=10.0.0.7 user_agent=...`, or the same keys in JSON under
--log-format json) and the sampling (--access-log-sample): a request is logged with that
probability, so a busy gateway can keep a representative trickle. Routes are logged as
registered (`/v1/models/{model}`), never with the client's path, so a line holds no request
data. The client's address and user agent are read from the ASGI scope only for a line that is
written. Knows nothing about HTTP or routing beyond those values.
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

    def record(self, method: str, route: str, status: int, tokens: int, seconds: float,
               request_id: str = "", scope: dict | None = None) -> None:
        """`scope`: the request's ASGI scope, for its client address and user agent."""
        if not self._on or (self._sample < 1 and random.random() >= self._sample):
            return
        client, agent = "", ""
        if scope is not None:
            peer = scope.get("client")
            client = peer[0] if peer else ""
            for name, value in scope.get("headers", ()):
                if name == b"user-agent":
                    agent = value.decode("latin-1")
                    break
        log.info("%s", fields(event="access", request_id=request_id, method=method, route=route,
                              status=status, tokens=tokens, ms=round(seconds * 1000, 3),
                              client=client, user_agent=agent))
