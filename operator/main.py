"""`hedgerow operator`: run the Kubernetes operator for EmbeddingServices.

Owns the process: its settings (flags and HEDGEROW_* variables), logging, running kopf with
the registered handlers, and the /healthz, /readyz and /metrics endpoint beside it
(operator/probes.py). kopf logs in with the pod's service account, or a kubeconfig
(KUBECONFIG or ~/.kube/config) outside a cluster. With `--peering`, replicas of the operator
share a kopf peering object (operator/peering.py): one acts, the others stand by and take over
when it stops or its record expires; without it the operator runs standalone (one replica).
Knows nothing about what the handlers do.
"""

import argparse
import asyncio
import dataclasses
import logging
from typing import Any

import kopf
import yaml

from hedgerow import logs
from hedgerow import settings as settings_lib
from hedgerow.addresses import bind_error
from hedgerow.errors import ConfigError
from hedgerow.operator import peering, probes
from hedgerow.operator.metrics import OperatorMetrics
from hedgerow.operator.names import OPERATOR_HEALTH_PORT, SERVER_HTTP_PORT
from hedgerow.operator.registration import register

HELP = "Run the Kubernetes operator that turns EmbeddingServices into a serving fleet."

log = logging.getLogger("hedgerow.operator")


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = settings_lib.setting(
        (),
        "Namespaces to watch, comma separated. Globs (ml-*) are allowed and need permission "
        "to list and watch namespaces cluster-wide; empty watches the whole cluster, which "
        "needs the chart's ClusterRole.",
    )
    resync_interval: float = settings_lib.setting(
        30.0,
        "How often every EmbeddingService is re-applied in full, repairing drift (a deleted "
        "or edited child). Each pass costs about thirty API requests per resource (read, "
        "dry-run and apply each child, then status).",
        unit="seconds", minimum=0.1,
    )
    warmup_interval: float = settings_lib.setting(
        5.0,
        "How often server pods' /warmup is read and readiness gates updated. Lower admits a "
        "warm replica to traffic sooner, at one HTTP request per pod per interval.",
        unit="seconds", minimum=0.1,
    )
    warmup_port: int = settings_lib.setting(
        SERVER_HTTP_PORT, "Port of the servers' /warmup endpoint.", unit="TCP port", minimum=1,
        maximum=65535,
    )
    warmup_timeout: float = settings_lib.setting(
        2.0, "Longest wait for one pod's /warmup answer.", unit="seconds", minimum=0.01,
    )
    health_port: int = settings_lib.setting(
        OPERATOR_HEALTH_PORT,
        "Port of /healthz (liveness), /readyz (readiness: 200 once kopf has started) and "
        "/metrics (reconciliations by outcome); 0 turns them off.", unit="TCP port",
        minimum=0, maximum=65535,
    )
    peering: str = settings_lib.setting(
        "",
        "Name of the kopf peering object (ClusterKopfPeering cluster-wide, else a KopfPeering "
        "in each watched namespace) the operator's replicas share: the replica that started "
        "first acts, the others stand by. Empty runs standalone: one replica only.",
    )
    peering_lifetime: int = settings_lib.setting(
        15,
        "How long a replica's peering record holds without renewal: a replica that dies "
        "without stopping cleanly (a clean stop hands over at once) is taken over after at "
        "most this. Renewed every few seconds, one request each.",
        unit="seconds", minimum=2, maximum=3600,
    )
    log_level: str = settings_lib.setting("info", "Log verbosity.", choices=logs.LOG_LEVELS)
    log_format: str = logs.format_setting()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings_lib.add_arguments(parser, OperatorSettings)


async def operate(config: OperatorSettings, *, stop_flag: Any = None,
                  ready_flag: Any = None) -> None:
    """Run kopf until `stop_flag` is set (or forever), with the probes' endpoint beside it."""
    registry = kopf.OperatorRegistry()
    metrics = OperatorMetrics()
    register(registry, config, metrics)
    ready = ready_flag if ready_flag is not None else asyncio.Event()
    endpoint = (await probes.start(config.health_port, ready, metrics)
                if config.health_port else None)
    try:
        await kopf.operator(
            registry=registry,
            **peering.options(config.peering),
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            stop_flag=stop_flag,
            ready_flag=ready,
        )
    finally:
        if endpoint is not None:
            await endpoint.cleanup()


def check_credentials() -> None:
    """Log in once up front as kopf will: kopf retries a failed login forever, with a
    traceback each time, which hides a missing or broken kubeconfig."""
    settings = kopf.OperatorSettings()
    try:
        info = (kopf.login_with_service_account(settings=settings)
                or kopf.login_with_kubeconfig(settings=settings))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError,
            kopf.LoginError) as error:
        raise ConfigError(f"cannot read the Kubernetes credentials (KUBECONFIG, ~/.kube/config "
                          f"or the pod's service account): {type(error).__name__}: "
                          f"{' '.join(str(error).split())}"
                          ) from None
    if info is None:
        raise ConfigError("no Kubernetes credentials: run in a pod with a service account, or "
                          "set KUBECONFIG (or write ~/.kube/config)")


def check_health_port(port: int) -> None:
    if not port:
        return
    error = bind_error("0.0.0.0", port)
    if error is not None:
        raise ConfigError(f"cannot listen for health checks on port {port}: "
                          f"{error.strerror} (pass --health-port)")


def run(args: argparse.Namespace) -> int:
    config = settings_lib.load(OperatorSettings, args)
    logs.configure(config.log_level, config.log_format)
    check_credentials()
    check_health_port(config.health_port)
    log.info("%s", logs.fields(event="operator.start", **settings_lib.describe(config)))
    asyncio.run(operate(config))
    return 0
