"""Handlers that coordinate: check what the schema cannot, apply the children, track warmup,
write status.

Owns the order of work for one EmbeddingService and nothing else: what the children contain
comes from the build_* modules, what a condition means from status.py, what "warm" means from
hedgerow.warmup_report (through warmup.py; so does whether a server's space matches the golden
set of `spec.guard`), how to talk to the API from kube.py. The spec itself
was validated by the API server (the CRD's schema and CEL rules). Reconciliation is level-based
and idempotent: every call applies the whole desired state (server-side apply), so create,
update, resume and the drift-repair timer all run the same `reconcile`. A spec that cannot be
reconciled for a reason no schema can see (a missing PVC, a missing or malformed golden set or
TLS Secret, a child name another object holds, a child the API server's validation or
admission refuses, all asked before any write) becomes `Ready=False` with a reason and an
event, and no child is touched: nothing half-built, no retry loop. Other API failures raise
kopf.TemporaryError, which kopf retries with a delay.
"""

import asyncio
import dataclasses
import logging
import weakref
from typing import Any, Mapping

import aiohttp
import kopf

from hedgerow import golden_set
from hedgerow.errors import ConfigError
from hedgerow.operator import (
    api_keys, build_fetch, build_tls, model_fetch_status, names, status, warmup,
)
from hedgerow.operator.kube import ApiError, KubeClient
from hedgerow.operator.manifests import build_all, keda_leftover, unwanted
from hedgerow.operator.spec import Service, parse

MODEL_VOLUME_MISSING = "ModelVolumeNotFound"
GOLDEN_SET_MISSING = "GoldenSetNotFound"
GOLDEN_SET_INVALID = "GoldenSetInvalid"
TLS_SECRET_MISSING = "TLSSecretNotFound"
TLS_SECRET_INVALID = "TLSSecretInvalid"
NAME_CONFLICT = "ChildNameTaken"
REJECTED = "RejectedByApiServer"
# Answers that say "this object, as written, will not be accepted" (validation, admission,
# quota): retrying the same spec cannot help, so they become Ready=False, not a retry loop.
REFUSALS = frozenset({400, 403, 422})
RETRY_DELAY_SECONDS = 10


class SpecError(Exception):
    """The resource cannot be reconciled as written; `reason` is one CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass
class Context:
    """What every handler shares: the operator's settings and its two HTTP clients."""

    config: Any  # hedgerow.operator.main.OperatorSettings
    kube: KubeClient
    probes: aiohttp.ClientSession | None = None
    stopping: bool = False  # set by kopf's clean-up: the clients are closed
    # Locks per EmbeddingService, by (purpose, namespace, name); weak values: a lock lives only
    # while somebody holds or waits on it.
    _locks: weakref.WeakValueDictionary = dataclasses.field(
        default_factory=weakref.WeakValueDictionary)
    # EmbeddingServices, by (namespace, name), whose last reconcile refused their spec. The
    # warmup timer's body can predate that pass's status patch; observing then wrote "rolling
    # out" over the refusal until the next pass (seen as flapping conditions and Events).
    refused: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    def _lock(self, *key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def gate_lock(self, service: Service) -> asyncio.Lock:
        """Around reading pods and writing their gates: reconcile and the warmup timer both
        observe, and one of them acting on a pod list read before the other's gate write would
        undo that write."""
        return self._lock("gates", service.namespace, service.name)

    def reconcile_lock(self, body: Mapping[str, Any]) -> asyncio.Lock:
        """Around one whole reconcile (and the warmup timer's pass): the resync timer and a
        change handler run concurrently, and a pass that read the spec before a change would
        apply the old children after the new ones (a rollout back and forth). Taken before
        the spec is read, the later pass reads the later spec (kopf's body is live)."""
        meta = body.get("metadata") or {}
        return self._lock("reconcile", meta.get("namespace") or "", meta.get("name") or "")


def _announce(body: Mapping[str, Any], changed: list[dict]) -> None:
    for cond in changed:
        healthy = cond["status"] == status.TRUE or (
            cond["type"] == status.PROGRESSING and cond["reason"] == status.COMPLETE)
        kopf.event(body, type="Normal" if healthy else "Warning", reason=cond["reason"],
                   message=f"{cond['type']}={cond['status']}: {cond['message']}")


def _write_conditions(body: Mapping[str, Any], patch: kopf.Patch, conditions: list[dict],
                      fields: dict) -> None:
    old = (body.get("status") or {}).get("conditions")
    patch.status.update(fields)
    patch.status["conditions"] = status.merge(old, conditions, status.now())
    _announce(body, status.transitions(old, conditions))


async def _preflight(ctx: Context, service: Service) -> tuple[str | None, str | None]:
    """Checks the schema cannot make: the model's PVC (or the PVC a fetched model is cached
    on) must exist; the TLS Secret `spec.tls` names must exist and hold certificates the
    processes accept; the golden set `spec.guard` names must exist and be one. Returns the
    golden set's content digest and the TLS Secret's (each None without its field)."""
    await _check_volumes(ctx, service)
    tls_digest = await _check_tls_secret(ctx, service)
    return await _check_golden_set(ctx, service), tls_digest


async def _check_tls_secret(ctx: Context, service: Service) -> str | None:
    """The TLS Secret's content digest (None without spec.tls); SpecError when it is missing
    or malformed, so no pod is written that would not start, or start half-secured."""
    if not build_tls.enabled(service):
        return None
    name = service.spec["tls"]["secretName"]
    found = await ctx.kube.get("v1", "Secret", service.namespace, name)
    if found is None:
        raise SpecError(TLS_SECRET_MISSING,
                        f"Secret {name!r} (spec.tls.secretName) does not exist in namespace "
                        f"{service.namespace!r}; cert-manager writes it from a Certificate "
                        "(docs/operator.md, Mutual TLS)")
    try:
        return build_tls.check_secret(found, service)
    except ConfigError as error:
        raise SpecError(TLS_SECRET_INVALID, str(error)) from None


async def _check_volumes(ctx: Context, service: Service) -> None:
    claim = service.spec["model"].get("persistentVolumeClaim")
    claims = [(claim["claimName"], "spec.model.persistentVolumeClaim.claimName")] \
        if claim is not None else []
    for name, field in claims + build_fetch.claims(service):
        found = await ctx.kube.get("v1", "PersistentVolumeClaim", service.namespace, name)
        if found is None:
            raise SpecError(MODEL_VOLUME_MISSING,
                            f"PersistentVolumeClaim {name!r} ({field}) does not exist in "
                            f"namespace {service.namespace!r}")


async def _check_golden_set(ctx: Context, service: Service) -> str | None:
    guard = service.spec.get("guard")
    if guard is None:
        return None
    name, key = guard["configMap"], guard["key"]
    found = await ctx.kube.get("v1", "ConfigMap", service.namespace, name)
    if found is None:
        raise SpecError(GOLDEN_SET_MISSING,
                        f"ConfigMap {name!r} (spec.guard.configMap) does not exist in namespace "
                        f"{service.namespace!r}; write it with `hedgerow guard record`")
    raw = (found.get("data") or {}).get(key)
    if raw is None:
        raise SpecError(GOLDEN_SET_INVALID,
                        f"ConfigMap {name!r} has no key {key!r} (spec.guard.key)")
    try:
        golden = golden_set.parse(raw, f"ConfigMap {name!r} key {key!r}")
    except golden_set.GoldenSetError as error:
        raise SpecError(GOLDEN_SET_INVALID, str(error)) from None
    task = service.spec["model"].get("task")  # left out: the checkpoint's, known to the server
    if task is not None and golden.task != task:
        raise SpecError(GOLDEN_SET_INVALID,
                        f"ConfigMap {name!r} holds a golden set of task {golden.task} "
                        f"({golden_set.HOLDS[golden.task]}); spec.model.task is {task}: record "
                        "it from this model with `hedgerow guard record`")
    return golden_set.content_digest(raw)


async def _api_keys_digest(ctx: Context, service: Service) -> str | None:
    """The digest of the API keys spec.gateway.apiKeySecret names (api_keys.py), read anew on
    every pass so a rotated Secret rolls the gateways; None when the API is open."""
    ref = api_keys.secret_ref(service)
    if ref is None:
        return None
    secret = await ctx.kube.get("v1", "Secret", service.namespace, ref["name"])
    try:
        return api_keys.digest(service, secret)
    except api_keys.SecretProblem as problem:
        raise SpecError(problem.reason, problem.message) from None


async def _check_children(ctx: Context, service: Service,
                          manifests: list[dict]) -> dict[tuple[str, str], dict]:
    """What only the API server can say, asked before anything is written, so a refused spec
    leaves no half-built children: a child name already taken by an object this resource does
    not own (applying would take it over), and a child the API server's validation or
    admission would refuse (a server-side dry run of every child). Returns the children that
    exist, by (kind, name), as read."""
    live = {}
    for manifest in manifests:
        meta = manifest["metadata"]
        found = await ctx.kube.get(manifest["apiVersion"], manifest["kind"], meta["namespace"],
                                   meta["name"])
        if found is None:
            continue
        live[(manifest["kind"], meta["name"])] = found
        if not names.owned_by(found, service):
            raise SpecError(NAME_CONFLICT,
                            f"{manifest['kind']} {meta['name']!r} already exists in namespace "
                            f"{service.namespace!r} and is not owned by this EmbeddingService; "
                            "rename this resource or remove that object")
    for manifest in manifests:
        try:
            await ctx.kube.apply(manifest, dry_run=True)
        except ApiError as error:
            if error.status not in REFUSALS:
                raise
            raise SpecError(REJECTED, f"the API server refuses {manifest['kind']} "
                                      f"{manifest['metadata']['name']!r}: {error.message}"
                            ) from None
    return live


async def reconcile(ctx: Context, body: Mapping[str, Any], patch: kopf.Patch,
                    logger: logging.Logger) -> str:
    """Bring every child to the spec's desired state, then refresh status (one pass at a time
    per resource). Returns `applied`, or `spec_rejected` when the spec cannot be applied (its
    conditions say why); an API failure raises kopf.TemporaryError."""
    async with ctx.reconcile_lock(body):
        return await _reconcile(ctx, body, patch, logger)


async def _reconcile(ctx: Context, body: Mapping[str, Any], patch: kopf.Patch,
                     logger: logging.Logger) -> str:
    generation = (body.get("metadata") or {}).get("generation")
    service = parse(body)
    key = (service.namespace, service.name)
    try:
        await _leave_keda(ctx, service, logger)
        golden_digest, tls_digest = await _preflight(ctx, service)
        manifests = build_all(service, golden_digest, await _api_keys_digest(ctx, service),
                              tls_digest)
        live = await _check_children(ctx, service, manifests)
    except SpecError as error:
        ctx.refused.add(key)
        logger.warning("spec rejected: %s: %s", error.reason, error.message)
        _write_conditions(body, patch, status.invalid_conditions(
            error.reason, error.message, generation),
            status.status_fields(service.model_label, None, generation))
        return "spec_rejected"
    except ApiError as error:
        raise kopf.TemporaryError(str(error), delay=RETRY_DELAY_SECONDS) from None
    ctx.refused.discard(key)
    try:
        if service.autoscaled:
            await hand_replicas_to_hpa(ctx.kube, service,
                                       live.get(("Deployment", names.server_name(service))))
        if service.gateways_autoscaled:
            await hand_replicas_to_hpa(ctx.kube, service,
                                       live.get(("Deployment", names.gateway_name(service))),
                                       "gateway")
        for manifest in manifests:
            await ctx.kube.apply(manifest)
        for child in unwanted(service):
            if await ctx.kube.delete(child.api_version, child.kind, service.namespace,
                                     child.name):
                logger.info("deleted %s %s", child.kind, child.name)
        await observe(ctx, service, body, patch, generation)
    except ApiError as error:
        raise kopf.TemporaryError(str(error), delay=RETRY_DELAY_SECONDS) from None
    return "applied"


async def _leave_keda(ctx: Context, service: Service, logger: logging.Logger) -> None:
    """Delete the ScaledObject left from engine keda (manifests.keda_leftover) before the
    checks: until its HPA is gone the checks see `<name>-server` owned by KEDA and wait."""
    hpa = await ctx.kube.get("autoscaling/v2", "HorizontalPodAutoscaler", service.namespace,
                             names.server_name(service))
    leftover = keda_leftover(service, hpa)
    if leftover is not None and await ctx.kube.delete(
            leftover.api_version, leftover.kind, service.namespace, leftover.name):
        logger.info("deleted %s %s (engine keda is off)", leftover.kind, leftover.name)


async def track_warmup(ctx: Context, body: Mapping[str, Any], patch: kopf.Patch,
                       logger: logging.Logger) -> None:
    """Timer: read each server pod's warmup, set its gate, refresh the conditions (unless
    reconcile reported that the spec cannot be applied: that report stays). Between two
    reconcile passes, never during one: a pass's refusal is then known here (`ctx.refused`)
    even while `body` predates its status patch."""
    service = parse(body)
    acted_on = (body.get("status") or {}).get("observedGeneration")
    async with ctx.reconcile_lock(body):
        try:
            if (service.namespace, service.name) in ctx.refused or status.spec_not_applied(
                    (body.get("status") or {}).get("conditions")):
                await track_gates(ctx, service, body)
            else:
                await observe(ctx, service, body, patch, acted_on)
        except ApiError as error:
            if not ctx.stopping:  # else the client was closed under it by clean-up
                logger.warning("warmup tracking failed: %s", error)


def _owns_replicas(deployment: Mapping[str, Any], manager: str) -> bool:
    return any(entry.get("manager") == manager and entry.get("operation") == "Apply"
               and "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
               for entry in (deployment.get("metadata") or {}).get("managedFields") or ())


async def hand_replicas_to_hpa(kube: KubeClient, service: Service,
                               live: Mapping[str, Any] | None,
                               component: names.Component = "server") -> None:
    """Before the first apply without `replicas`, keep the live count (`live`: the
    component's Deployment as just read, None when there is none).

    Under server-side apply, a field dropped from the only manager's apply is reset to its
    default: turning autoscaling on for a running fleet would scale it to 1 replica (warm GPU
    servers killed) until the HPA scales it back up from cold (the same for gateways and their
CPU HPA). So while the operator still
    owns `replicas`, a second manager applies the live value first; it then stays owned by
    that manager until the HPA changes it (Kubernetes' documented ownership handover)."""
    if live is None or not _owns_replicas(live, names.FIELD_MANAGER):
        return
    replicas = (live.get("spec") or {}).get("replicas")
    if replicas is None:
        return
    name = names.server_name(service) if component == "server" else names.gateway_name(service)
    await kube.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": name, "namespace": service.namespace},
                      "spec": {"replicas": replicas}}, field_manager=names.HANDOVER_MANAGER)


async def observe(ctx: Context, service: Service, body: Mapping[str, Any], patch: kopf.Patch,
                  generation: int | None) -> None:
    """Count ready and warm pods, update readiness gates, write status and conditions."""
    server = await ctx.kube.get("apps/v1", "Deployment", service.namespace,
                                names.server_name(service))
    gateway = await ctx.kube.get("apps/v1", "Deployment", service.namespace,
                                 names.gateway_name(service))
    results = await track_gates(ctx, service, body)
    warm = sum(decision.status == "True" for _, decision in results)
    if service.autoscaled:
        desired = int(((server or {}).get("spec") or {}).get(
            "replicas", service.spec["autoscaling"]["minReplicas"]))
    else:
        desired = service.spec["server"]["replicas"]
    gateways = service.spec["gateway"]["replicas"]
    if service.gateways_autoscaled:
        gateways = int(((gateway or {}).get("spec") or {}).get(
            "replicas", service.spec["gateway"]["autoscaling"]["minReplicas"]))
    seen = status.observed_from(server, gateway, desired, gateways, warm)
    conditions = status.healthy_conditions(seen, generation)
    guard = service.spec.get("guard")
    if guard is not None:
        pods = [status.PodSpace(name, decision.status == "True", decision.space)
                for name, decision in results]
        conditions.append(status.space_condition(pods, guard["configMap"], guard["minCosine"],
                                                 generation, guard["maxScoreDelta"]))
    model = service.model_label
    hub = build_fetch.hugging_face(service)
    if hub is not None:  # spec.model.huggingFace: what each pod's fetch says
        fetches = model_fetch_status.observe(
            await ctx.kube.list("v1", "Pod", service.namespace, names.instance_selector(service)),
            hub)
        conditions.append(model_fetch_status.fetched_condition(fetches, hub, generation))
        model = model_fetch_status.label(hub, fetches)
    _write_conditions(body, patch, conditions,
                      status.status_fields(model, seen, generation, names.service_url(service),
                                           names.selector_text(service, "server")))


async def update_gates(ctx: Context,
                       service: Service) -> list[tuple[str, warmup.GateDecision, bool]]:
    """Set each server pod's readiness gate from its /warmup.

    Returns (pod name, decision, whether the gate was written) per pod.
    Reads the pods and writes their gates under the service's gate lock, so a decision is
    never made on a pod list older than another handler's gate write.
    """
    async with ctx.gate_lock(service):
        pods = await ctx.kube.list("v1", "Pod", service.namespace,
                                   names.selector(service, "server"))
        views = [warmup.server_pod(pod) for pod in pods
                 if not (pod.get("metadata") or {}).get("deletionTimestamp")]
        guard = service.spec.get("guard")
        minimum = guard["minCosine"] if guard is not None else None
        delta = (guard or {}).get("maxScoreDelta", golden_set.DEFAULT_MAX_SCORE_DELTA)
        decisions = await asyncio.gather(*(_decide(ctx, view, minimum, delta)
                                           for view in views))
        gated = service.spec["warmup"]["readinessGate"]
        at = status.now()
        results = []
        for view, decision in zip(views, decisions):
            written = gated and warmup.needs_patch(view, decision)
            if written:
                await ctx.kube.patch_pod_status(
                    service.namespace, view.name,
                    {"status": {"conditions": [warmup.gate_condition(view, decision, at)]}})
            results.append((view.name, decision, written))
    return results


async def track_gates(ctx: Context, service: Service,
                      body: Mapping[str, Any]) -> list[tuple[str, warmup.GateDecision]]:
    """update_gates, announcing each gate written as an event on the resource `body`; (pod
    name, decision) per pod."""
    results = await update_gates(ctx, service)
    for name, decision, written in results:
        if written:
            kopf.event(body, type="Normal" if decision.status == "True" else "Warning",
                       reason=decision.reason,
                       message=f"pod {name}: {names.GATE_CONDITION}={decision.status}: "
                               f"{decision.message}")
    return [(name, decision) for name, decision, _ in results]


async def _decide(ctx: Context, view: warmup.ServerPod, min_cosine: float | None,
                  max_score_delta: float) -> warmup.GateDecision:
    report, error = None, None
    if view.running and view.ip and ctx.probes is not None:
        try:
            report = await warmup.fetch_report(ctx.probes, view.ip, ctx.config.warmup_port,
                                               ctx.config.warmup_timeout)
        except warmup.WarmupUnavailable as failure:
            error = str(failure)
    return warmup.decide(view, report, error, min_cosine, max_score_delta)
