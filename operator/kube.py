"""A small asynchronous Kubernetes API client: the handful of calls the operator makes.

Owns HTTP to the API server for children and pods: server-side apply (field manager
`hedgerow-operator`, forced; created with POST when the object does not exist yet), get, list,
delete, and strategic-merge patches of `pods/status`. Credentials are kopf's `ConnectionInfo`,
handed over by the login handler, so kopf and this client always talk to the same cluster as
the same identity. Knows nothing about EmbeddingServices; errors surface as `ApiError`.
"""

import base64
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import aiohttp

from hedgerow.operator.names import FIELD_MANAGER

APPLY = "application/apply-patch+yaml"  # JSON is YAML; the API server accepts it as is
STRATEGIC = "application/strategic-merge-patch+json"

# kind -> plural for the kinds the operator touches (their apiVersion is in the manifest).
PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "Pod": "pods",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.message = message


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{quote(namespace)}/{PLURALS[kind]}"


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{quote(name)}"


def _write_temp(data: str | bytes, directory: Path) -> str:
    raw = data if isinstance(data, bytes) else base64.b64decode(data)
    handle = tempfile.NamedTemporaryFile(dir=directory, delete=False)
    with handle:
        handle.write(raw)
    return handle.name


def ssl_context(info: Any, scratch: Path) -> ssl.SSLContext | bool:
    """TLS settings of a kopf ConnectionInfo (CA, client certificate, insecure flag)."""
    if not str(info.server).startswith("https"):
        return False
    if info.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif info.ca_path:
        context = ssl.create_default_context(cafile=str(info.ca_path))
    elif info.ca_data:
        context = ssl.create_default_context(cafile=_write_temp(info.ca_data, scratch))
    else:
        context = ssl.create_default_context()
    cert = info.certificate_path or (info.certificate_data and
                                     _write_temp(info.certificate_data, scratch))
    key = info.private_key_path or (info.private_key_data and
                                    _write_temp(info.private_key_data, scratch))
    if cert:
        context.load_cert_chain(str(cert), str(key) if key else None)
    return context


class KubeClient:
    """One aiohttp session to the API server; `connect(info)` (re)points it."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self._scratch = tempfile.TemporaryDirectory(prefix="hedgerow-operator-")

    async def connect(self, info: Any) -> None:
        """Use kopf's ConnectionInfo `info` for every later call."""
        await self.close()
        headers = {"User-Agent": FIELD_MANAGER}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
        connector = aiohttp.TCPConnector(ssl=ssl_context(info, Path(self._scratch.name)))
        self._server = str(info.server).rstrip("/")
        self._session = aiohttp.ClientSession(headers=headers, auth=auth, connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=30))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, method: str, path: str, *, body: Any = None,
                    content_type: str = "application/json",
                    params: Mapping[str, str] | None = None) -> dict:
        if self._session is None:
            raise ApiError(0, method, path, "not connected (no login yet)")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session.request(method, self._server + path, data=data,
                                         headers=headers, params=params) as response:
            text = await response.text()
            if response.status >= 400:
                try:
                    message = json.loads(text).get("message", text)
                except ValueError:
                    message = text
                raise ApiError(response.status, method, path, str(message)[:500])
            return json.loads(text) if text else {}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return await self._call("GET", object_path(api_version, kind, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def list(self, api_version: str, kind: str, namespace: str,
                   labels: Mapping[str, str]) -> list[dict]:
        """Objects whose labels include `labels` (also filtered here: the selector is a
        request, the filter a guarantee)."""
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        found = await self._call("GET", collection_path(api_version, kind, namespace),
                                 params={"labelSelector": selector})
        return [item for item in found.get("items", [])
                if labels.items() <= ((item.get("metadata") or {}).get("labels") or {}).items()]

    async def apply(self, manifest: Mapping[str, Any],
                    field_manager: str = FIELD_MANAGER, dry_run: bool = False) -> dict:
        """Server-side apply as `field_manager`, taking conflicting fields (force); with
        `dry_run`, validated and admitted by the API server but not stored.

        Where the API answers 404 for a missing object (an API server without apply-create),
        the object is created instead; the next apply then takes ownership of its fields."""
        meta = manifest["metadata"]
        path = object_path(manifest["apiVersion"], manifest["kind"], meta["namespace"],
                           meta["name"])
        params = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        try:
            return await self._call("PATCH", path, body=manifest, content_type=APPLY,
                                    params=params)
        except ApiError as error:
            if error.status != 404:
                raise
        collection = collection_path(manifest["apiVersion"], manifest["kind"], meta["namespace"])
        try:
            return await self._call("POST", collection, body=manifest, params={
                key: value for key, value in params.items() if key != "force"})
        except ApiError as error:
            if error.status != 409:
                raise
        # Someone created it between the two calls: apply onto it.
        return await self._call("PATCH", path, body=manifest, content_type=APPLY, params=params)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete if present; True when something was deleted."""
        try:
            await self._call("DELETE", object_path(api_version, kind, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def patch_pod_status(self, namespace: str, name: str, patch: dict) -> dict:
        """Strategic-merge patch of pods/status (conditions merge by their `type`)."""
        path = object_path("v1", "Pod", namespace, name) + "/status"
        return await self._call("PATCH", path, body=patch, content_type=STRATEGIC)
