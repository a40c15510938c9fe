"""Registration of the kopf handlers: which event or timer calls which handler.

Owns the wiring only: login (kopf's service-account or kubeconfig login, shared with the
operator's own API client), start-up tuning of kopf, create/update/resume and the drift-repair
timer on `reconcile`, the warmup timer on `track_warmup`, and clean-up. Everything a handler
does lives in handlers.py; everything it builds in the build_* modules.
"""

import logging
import time
from typing import Any

import aiohttp
import kopf

from hedgerow.operator import crd, handlers
from hedgerow.operator.kube import KubeClient
from hedgerow.operator.metrics import OperatorMetrics

RESOURCE = (crd.GROUP, crd.VERSION, crd.PLURAL)


def needs_namespace_scanning(namespaces: tuple[str, ...]) -> bool:
    """kopf lists namespaces to match globs (ml-*) and the whole cluster when none is named;
    exact names need no cluster-wide read. With scanning off, kopf drops a glob silently."""
    return not namespaces or any(char in ns for ns in namespaces for char in "*?[")


def register(registry: kopf.OperatorRegistry, config: Any,
             metrics: OperatorMetrics | None = None) -> handlers.Context:
    """Register every handler on `registry`; `config` is an OperatorSettings; reconciliations
    are counted in `metrics`."""
    ctx = handlers.Context(config=config, kube=KubeClient())
    metrics = metrics or OperatorMetrics()

    async def counted(trigger: str, body: kopf.Body, patch: kopf.Patch,
                      logger: logging.Logger) -> None:
        if ctx.stopping:
            return
        started, outcome = time.perf_counter(), "error"
        try:
            outcome = await handlers.reconcile(ctx, body, patch, logger)
        except kopf.TemporaryError:
            outcome = "api_error"
            if not ctx.stopping:  # else the client was closed under it by clean-up
                raise
        finally:
            metrics.observe(trigger, outcome, time.perf_counter() - started)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Only explicit events (condition and gate transitions) reach the cluster.
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60
        if not needs_namespace_scanning(config.namespaces):
            # Watching named namespaces needs no cluster-wide reads (namespaces, CRDs), so
            # the chart's per-namespace Roles are all the operator holds.
            settings.scanning.disabled = True
        settings.peering.lifetime = config.peering_lifetime
        ctx.probes = aiohttp.ClientSession()

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
        if info is not None:
            ctx.kube.connect(info)
        return info

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        # Timers can outlive clean-up: those in flight, and those kopf starts again for an event
        # still being handled at the stop signal (it cancels them 5 s later). They must neither
        # act nor report the closed client's "not connected" as a failure.
        ctx.stopping = True
        ctx.kube.close()
        if ctx.probes is not None:
            await ctx.probes.close()

    @kopf.on.resume(*RESOURCE, registry=registry)
    @kopf.on.create(*RESOURCE, registry=registry)
    @kopf.on.update(*RESOURCE, registry=registry)
    async def reconcile(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger,
                        **_: Any) -> None:
        await counted("event", body, patch, logger)

    @kopf.timer(*RESOURCE, interval=config.resync_interval, registry=registry, id="resync")
    async def resync(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger,
                     **_: Any) -> None:
        await counted("resync", body, patch, logger)

    @kopf.timer(*RESOURCE, interval=config.warmup_interval, registry=registry, id="warmup")
    async def track_warmup(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger,
                           **_: Any) -> None:
        if not ctx.stopping:
            await handlers.track_warmup(ctx, body, patch, logger)

    return ctx
