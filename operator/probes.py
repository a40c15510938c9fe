"""The operator's HTTP endpoint on --health-port: liveness, readiness and metrics.

Owns three routes: `/healthz` answers 200 while the process's event loop serves (the
liveness probe: a wedged loop fails it); `/readyz` answers 200 once kopf has started (logged
in, startup handlers run, watching), 503 before that and while it stops; `/metrics` is the
Prometheus text of operator/metrics.py. Knows nothing about what the handlers do.
"""

from typing import Any

from aiohttp import web

from hedgerow.operator.metrics import OperatorMetrics


async def start(port: int, ready: Any, metrics: OperatorMetrics) -> web.AppRunner:
    """Serve on 0.0.0.0:`port` until the returned runner's `cleanup()`; `ready` is the flag
    kopf sets when it has started (anything with `is_set()`)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if ready.is_set():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "starting"}, status=503,
                                 headers={"Retry-After": "1"})

    async def prometheus(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": metrics.content_type})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", prometheus)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner
