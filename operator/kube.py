"""The operator's calls to the Kubernetes API, made with the `kubernetes` package.

Owns the handful of calls the handlers make: server-side apply (field manager
`hedgerow-operator`, forced; created first where an API server answers an apply on a missing
object with 404), get, list by labels, delete, and strategic-merge patches of `pods/status`.
They go through the package's dynamic client (discovery maps a kind to its resource), one
blocking call at a time on a worker thread, so kopf's event loop never waits. Credentials are
kopf's `ConnectionInfo`, handed over by the login handler, so kopf and these calls always talk
to the same cluster as the same identity. Knows nothing about EmbeddingServices; every failure
surfaces as `ApiError`.
"""

import asyncio
import base64
import json
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

import urllib3
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

from hedgerow.operator.names import FIELD_MANAGER

STRATEGIC = "application/strategic-merge-patch+json"
TIMEOUT_SECONDS = 30


class ApiError(Exception):
    """A call failed: `status` is the HTTP status, 0 when no answer came."""

    def __init__(self, status: int, what: str, message: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {message}" if status else f"{what}: {message}")
        self.status = status
        self.message = message


def _as_dict(_client: Any, data: Any) -> Any:
    # Plain dicts, as the handlers read them (the package's ResourceInstance also insists on
    # a `kind` in list answers, which not every API server sends).
    return data


def configuration(info: Any, scratch: Path) -> client.Configuration:
    """The package's configuration for a kopf ConnectionInfo: server, TLS, identity."""
    config = client.Configuration()
    config.host = str(info.server).rstrip("/")
    config.verify_ssl = not info.insecure
    config.ssl_ca_cert = info.ca_path or _file(info.ca_data, scratch)
    config.cert_file = info.certificate_path or _file(info.certificate_data, scratch)
    config.key_file = info.private_key_path or _file(info.private_key_data, scratch)
    config.proxy = info.proxy_url
    if info.token:
        config.api_key = {"authorization": f"{info.scheme or 'Bearer'} {info.token}"}
    elif info.username:
        pair = f"{info.username}:{info.password or ''}".encode()
        config.api_key = {"authorization": "Basic " + base64.b64encode(pair).decode()}
    return config


def _file(data: str | bytes | None, scratch: Path) -> str | None:
    """kopf passes certificates and keys as base64 text or raw bytes; the package wants files."""
    if not data:
        return None
    raw = data if isinstance(data, bytes) else base64.b64decode(data)
    handle = tempfile.NamedTemporaryFile(dir=scratch, delete=False)
    with handle:
        handle.write(raw)
    return handle.name


class KubeClient:
    """The API calls of one operator process; `connect(info)` (re)points them."""

    def __init__(self) -> None:
        self._api: client.ApiClient | None = None
        self._dynamic: dynamic.DynamicClient | None = None
        self._resources: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()  # discovery fills shared caches
        self._scratch: tempfile.TemporaryDirectory | None = None

    def connect(self, info: Any) -> None:
        """Use kopf's ConnectionInfo `info` for every later call (discovery happens on the
        first call, on the worker thread)."""
        self.close()
        scratch = tempfile.TemporaryDirectory(prefix="hedgerow-operator-")
        api = client.ApiClient(configuration(info, Path(scratch.name)))
        api.user_agent = FIELD_MANAGER
        with self._lock:
            self._scratch, self._api = scratch, api

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.close()
            if self._scratch is not None:
                self._scratch.cleanup()
            self._api, self._dynamic, self._scratch = None, None, None
            self._resources.clear()

    def _resource(self, api_version: str, kind: str) -> tuple[dynamic.DynamicClient, Any]:
        with self._lock:
            if self._api is None:
                raise ApiError(0, f"{kind} {api_version}", "not connected (no login yet)")
            if self._dynamic is None:
                cache = str(Path(self._scratch.name) / "discovery.json")
                self._dynamic = dynamic.DynamicClient(self._api, cache_file=cache)
            key = (api_version, kind)
            if key not in self._resources:
                self._resources[key] = self._dynamic.resources.get(api_version=api_version,
                                                                   kind=kind)
            return self._dynamic, self._resources[key]

    async def _call(self, verb: str, api_version: str, kind: str, what: str, *,
                    subresource: str | None = None, **options: Any) -> Any:
        """`verb` (a DynamicClient method: get, create, server_side_apply, patch, delete) on
        `kind`, on the worker thread; `what` names the object in errors."""
        def blocking() -> Any:
            try:
                dyn, resource = self._resource(api_version, kind)
                if subresource:
                    resource = resource.subresources[subresource]
                return getattr(dyn, verb)(resource, serializer=_as_dict,
                                          _request_timeout=TIMEOUT_SECONDS, **options)
            except DynamicApiError as error:
                raise ApiError(error.status, f"{verb} {what}", _message(error)) from None
            except ResourceNotFoundError:
                raise ApiError(0, f"{verb} {what}",
                               f"the API server does not serve {kind} {api_version}") from None
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiError(0, f"{verb} {what}", f"{type(error).__name__}: {error}") from None

        return await asyncio.to_thread(blocking)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return await self._call("get", api_version, kind, f"{kind} {namespace}/{name}",
                                    name=name, namespace=namespace)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def list(self, api_version: str, kind: str, namespace: str,
                   labels: Mapping[str, str]) -> list[dict]:
        """Objects whose labels include `labels` (also filtered here: the selector is a
        request, the filter a guarantee)."""
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        found = await self._call("get", api_version, kind, f"{kind}s in {namespace}",
                                 namespace=namespace, label_selector=selector)
        return [item for item in found.get("items") or []
                if labels.items() <= ((item.get("metadata") or {}).get("labels") or {}).items()]

    async def apply(self, manifest: Mapping[str, Any], field_manager: str = FIELD_MANAGER,
                    dry_run: bool = False) -> dict:
        """Server-side apply as `field_manager`, taking conflicting fields (force); with
        `dry_run`, validated and admitted by the API server but not stored.

        Where the API answers 404 for a missing object (an API server without apply-create),
        the object is created instead; the next apply then takes ownership of its fields."""
        meta, kind, api_version = manifest["metadata"], manifest["kind"], manifest["apiVersion"]
        what = f"{kind} {meta['namespace']}/{meta['name']}"
        options = {"body": dict(manifest), "namespace": meta["namespace"],
                   "field_manager": field_manager, "dry_run": "All" if dry_run else None}
        apply = {**options, "name": meta["name"], "force_conflicts": True}
        try:
            return await self._call("server_side_apply", api_version, kind, what, **apply)
        except ApiError as error:
            if error.status != 404:
                raise
        try:
            return await self._call("create", api_version, kind, what, **options)
        except ApiError as error:
            if error.status != 409:
                raise
        # Someone created it between the two calls: apply onto it.
        return await self._call("server_side_apply", api_version, kind, what, **apply)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete if present; True when something was deleted."""
        try:
            await self._call("delete", api_version, kind, f"{kind} {namespace}/{name}",
                             name=name, namespace=namespace)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def patch_pod_status(self, namespace: str, name: str, patch: dict) -> dict:
        """Strategic-merge patch of pods/status (conditions merge by their `type`)."""
        return await self._call("patch", "v1", "Pod", f"Pod {namespace}/{name}/status",
                                subresource="status", body=patch, name=name,
                                namespace=namespace, content_type=STRATEGIC)


def _message(error: DynamicApiError) -> str:
    """The API server's own message (its Status object), else the HTTP reason."""
    try:
        message = json.loads(error.body).get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return str(message or error.reason)[:500]
