"""API-key rotation end to end: a rotated Secret rolls the gateways, and the new pods take the
new key and refuse the old one.

Real: the kopf operator (against kmock), the Secret, ConfigMap and Deployment it reads and
writes through the Kubernetes API, `hedgerow gateway` processes (its settings, API-key check
and HTTP server, the packaged model's tokenizer) and the HTTP requests to them.

Stand-ins: kmock has no Deployment controller and no kubelet, so `Kubelet` below plays both. It
starts a "pod" from the gateway Deployment's pod template as the API has it: it writes every
key of the Secret that the template mounts at the keys file's directory (a temporary
directory standing in for the mount path, with HEDGEROW_API_KEYS_FILE moved into it), and runs
the container's command with the environment the pod gets (the ConfigMap of its `envFrom`, then
its `env`). Only what cannot be the same on this machine is changed: the listen address and
port, the model path (the packaged model for the model volume), and `--servers` naming a gRPC
stand-in for the servers (tests/gateway/conftest.py) in place of the server Service's DNS.
A new pod starts only when the pod template changes, as a Deployment rolls; a real kubelet also
refreshes a running pod's mounted Secret, which `Kubelet.refresh` does. The gateway reads its
keys file once, at start (gateway/auth.py): the refreshed file changes nothing in a running
gateway, so it is the roll, the digest of the Secret in the pod template
(operator/api_keys.py), that carries a rotation to the pods.
"""

import asyncio
import base64
import copy
from pathlib import Path

import httpx
import pytest

from hedgerow import settings
from hedgerow.operator import names
from tests.children import RealGateway
from tests.gateway import conftest as gateway_helpers

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

OLD_KEY, NEW_KEY = "sk-old-4b1d", "sk-new-9e2c"
KEYS_FILE = settings.env_name("api_keys_file")


def _secret(cluster, key: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "keys", "namespace": cluster.namespace, "resourceVersion": "1"},
            "data": {"api-keys": base64.b64encode(f"# rotated by hand\n{key}\n".encode()).decode()}}


class Pod:
    """One gateway "pod": its mounted Secret's directory and its `hedgerow gateway`."""

    def __init__(self, mount: Path, secret_name: str, gateway, served_name: str) -> None:
        self.mount, self.secret_name = mount, secret_name
        self.gateway, self.served_name = gateway, served_name


class Kubelet:
    """Starts gateway pods from the Deployment's template, as described in the module
    docstring."""

    def __init__(self, cluster, directory: Path, servers: list[str], model_dir: Path) -> None:
        self.cluster, self.directory = cluster, directory
        self.servers, self.model_dir = servers, model_dir
        self.pods: list[Pod] = []

    async def template(self) -> dict:
        deployment = await self.cluster.get(
            self.cluster.child_path("apps/v1", "deployments", "emb-gateway"))
        return deployment["spec"]["template"]

    async def _write_secret(self, name: str, mount: Path) -> None:
        secret = await self.cluster.get(
            f"/api/v1/namespaces/{self.cluster.namespace}/secrets/{name}")
        for key, value in secret["data"].items():  # a Secret volume without items: every key
            staged = mount / f".{key}.new"
            staged.write_bytes(base64.b64decode(value))
            staged.replace(mount / key)  # atomically, as the kubelet swaps its ..data link

    async def start(self, template: dict, key: str) -> Pod:
        """A pod of `template`, ready (its /readyz, asked with `key`, names the servers)."""
        spec = template["spec"]
        container = spec["containers"][0]
        assert container["command"] == ["hedgerow"] and container["args"] == ["gateway"]
        config = await self.cluster.get(self.cluster.child_path(
            "v1", "configmaps", container["envFrom"][0]["configMapRef"]["name"]))
        env = {**config["data"], **{item["name"]: item["value"] for item in container["env"]}}
        keys_file = Path(env[KEYS_FILE])
        mount = next((m for m in container["volumeMounts"]
                      if Path(m["mountPath"]) == keys_file.parent), None)
        assert mount is not None, f"{KEYS_FILE}={keys_file} is in no volume the pod mounts"
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        local = self.directory / f"pod{len(self.pods)}"
        local.mkdir()
        await self._write_secret(volume["secret"]["secretName"], local)
        del env[settings.env_name("service_dns")]  # --servers in its place
        env.update({KEYS_FILE: str(local / keys_file.name), settings.env_name("host"): "127.0.0.1",
                    settings.env_name("model"): str(self.model_dir)})
        gateway = RealGateway(
            self.directory / f"{local.name}.log", self.servers, auth=_auth(key), env=env)
        pod = Pod(local, volume["secret"]["secretName"], gateway,
                  env[settings.env_name("served_model_name")])
        self.pods.append(pod)
        await asyncio.to_thread(  # off this event loop, which kmock serves from
            gateway.wait_until, lambda: gateway.ready_replicas() == 1, f"gateway {local.name}")
        return pod

    async def refresh(self, pod: Pod) -> None:
        """What the kubelet does to a running pod's Secret volume after the Secret changed."""
        await self._write_secret(pod.secret_name, pod.mount)

    def stop_all(self) -> list[int | None]:
        return [pod.gateway.stop() for pod in self.pods]


def _auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def _embed(pod: Pod, key: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=pod.gateway.url, timeout=60) as client:
        return await client.post("/v1/embeddings", headers=_auth(key),
                                 json={"model": pod.served_name, "input": ["hedgerows"]})


def _assert_refused(answer: httpx.Response) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json() == {"error": {"message": "incorrect API key provided",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "invalid_api_key"}}


async def test_a_rotated_key_is_refused_and_the_new_one_accepted_after_the_roll(
        cluster, tmp_path, default_model_dir):
    secrets = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    await cluster.post(secrets, _secret(cluster, OLD_KEY))
    spec = copy.deepcopy(cluster.resource("emb")["spec"])
    spec["gateway"].update(apiKeySecret={"name": "keys"}, cpu="1")  # one worker per gateway
    await cluster.post(cluster.cr_path, cluster.resource("emb", spec))
    server = gateway_helpers.StandIn()
    kubelet = Kubelet(cluster, tmp_path, [server.address], default_model_dir)
    try:
        async def digest():
            deployment = await cluster.get(
                cluster.child_path("apps/v1", "deployments", "emb-gateway"))
            return deployment and deployment["spec"]["template"]["metadata"][
                "annotations"].get(names.API_KEYS_HASH_ANNOTATION)

        await cluster.eventually(digest, "the gateway Deployment with the keys' digest")
        first = await kubelet.template()
        old = await kubelet.start(first, OLD_KEY)
        assert (await _embed(old, OLD_KEY)).status_code == 200
        _assert_refused(await _embed(old, NEW_KEY))

        await cluster.patch(f"{secrets}/keys", {"data": _secret(cluster, NEW_KEY)["data"]})

        async def rolled():
            template = await kubelet.template()
            return template if template != first else None

        second = await cluster.eventually(rolled, "a new gateway pod template (the roll)")
        assert (second["metadata"]["annotations"][names.API_KEYS_HASH_ANNOTATION]
                != first["metadata"]["annotations"][names.API_KEYS_HASH_ANNOTATION])
        await kubelet.refresh(old)
        assert OLD_KEY not in (old.mount / "api-keys").read_text()
        # the running gateway read its keys at start: until the roll replaces it, the old key
        assert (await _embed(old, OLD_KEY)).status_code == 200
        _assert_refused(await _embed(old, NEW_KEY))

        new = await kubelet.start(second, NEW_KEY)
        _assert_refused(await _embed(new, OLD_KEY))
        answer = await _embed(new, NEW_KEY)
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["data"][0]["embedding"]) == gateway_helpers.WIDTH
    finally:
        codes = kubelet.stop_all()
        server.stop(graceful=False)
    assert codes == [0, 0], [pod.gateway.log_text() for pod in kubelet.pods]
