"""`hedgerow operator` as a real process against kmock: it reconciles, serves /healthz, /readyz
and /metrics (reconciliations counted), logs JSON when asked, stops cleanly on SIGTERM, and
refuses bad settings with a one-line error."""

import asyncio
import json
import os
import signal
import subprocess
import sys

import aiohttp
import pytest

from tests.conftest import free_port, hedgerow_command

pytestmark = pytest.mark.slow


@pytest.mark.asyncio
async def test_operator_process_reconciles_and_stops_on_sigterm(kube_api, subprocess_env):
    port = free_port()
    env = {**subprocess_env, "KUBECONFIG": str(kube_api.kubeconfig),
           "HEDGEROW_RESYNC_INTERVAL": "0.5", "HEDGEROW_HEALTH_PORT": str(port),
           "HEDGEROW_LOG_FORMAT": "json"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "hedgerow", "operator", "--warmup-interval", "0.5",
        "--warmup-port", str(kube_api.warmup.port), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        await kube_api.post(kube_api.cr_path, kube_api.resource("emb"))
        path = kube_api.child_path("apps/v1", "deployments", "emb-gateway")
        deployment = await kube_api.eventually(lambda: kube_api.get(path), "gateway Deployment",
                                               timeout=60)
        assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["gateway"]

        async def answer(path: str) -> tuple[int, str]:
            try:
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                        return response.status, await response.text()
            except aiohttp.ClientError:
                return 0, ""

        async def healthy():
            return (await answer("/healthz"))[0] == 200 and (await answer("/readyz"))[0] == 200

        assert await kube_api.eventually(healthy, "/healthz and /readyz answering 200")

        async def counted():
            metrics = (await answer("/metrics"))[1]
            return any(line.startswith('hedgerow_operator_reconciles_total{outcome="applied"')
                       and not line.endswith(" 0.0") for line in metrics.splitlines())

        assert await kube_api.eventually(counted, "an applied reconciliation counted")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, output.decode()[-3000:]
    lines = [json.loads(line) for line in output.decode().splitlines() if line.startswith("{")]
    assert any(line.get("event") == "operator.start" for line in lines), output.decode()[-3000:]
    # Timers run after clean-up (kopf restarts them for the event in flight at the signal, and
    # those reconcile every 0.5 s here): they stay quiet, not reporting the closed client as a
    # failure. kopf's own notice of a timer it leaves running is expected.
    stopping = next(i for i, line in enumerate(lines) if "Operator is stopping" in
                    line.get("message", ""))
    after = [line for line in lines[stopping:] if line["level"] in ("WARNING", "ERROR")
             and "did not exit in time" not in line.get("message", "")]
    assert not after, [(line["time"], line["message"]) for line in after]


def test_bad_settings_exit_2_with_one_line(subprocess_env):
    result = subprocess.run(
        [sys.executable, "-P", "-m", "hedgerow", "operator", "--warmup-interval", "0"],
        capture_output=True, text=True, env=subprocess_env, timeout=60)
    assert result.returncode == 2
    assert "--warmup-interval: 0.0 is below the minimum 0.1" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kubeconfig, message", [
    (None, "no Kubernetes credentials"),
    ("/nonexistent/kubeconfig", "FileNotFoundError"),
    ("garbage", "cannot read the Kubernetes credentials"),
    ("apiVersion: v1\nkind: Config\n", "Current context is not set"),
])
def test_missing_or_broken_credentials_are_one_line_not_a_retry_loop(tmp_path, kubeconfig,
                                                                    message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")}
    env.pop("KUBECONFIG", None)
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if kubeconfig == "garbage":
        (tmp_path / "kc").write_text("clusters: [\n")
        env["KUBECONFIG"] = str(tmp_path / "kc")
    elif kubeconfig and kubeconfig.startswith("/"):
        env["KUBECONFIG"] = kubeconfig
    elif kubeconfig:
        (tmp_path / "kc").write_text(kubeconfig)
        env["KUBECONFIG"] = str(tmp_path / "kc")
    done = subprocess.run(hedgerow_command("operator", "--health-port", "0"), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr


def test_a_taken_health_port_is_one_line(tmp_path, subprocess_env):
    import socket

    from tests.operator.conftest import write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(hedgerow_command("operator", "--health-port", str(port)),
                              env={**subprocess_env, "KUBECONFIG": str(kubeconfig)},
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"cannot listen for health checks on port {port}" in done.stderr
    assert "Traceback" not in done.stderr
