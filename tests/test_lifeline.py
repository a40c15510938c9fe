"""A child of `hedgerow serve` stops by itself when its parent process is gone."""

import signal
import subprocess

from tests.conftest import free_port, hedgerow_command


def _gateway(env):
    return subprocess.Popen(
        hedgerow_command("gateway", "--servers", "127.0.0.1:1", "--port", str(free_port())),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_child_whose_parent_is_gone_stops(subprocess_env):
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that is no longer anybody's parent
    child = _gateway({**subprocess_env, "HEDGEROW_PARENT_PID": str(gone.pid)})
    try:
        code = child.wait(60)
    finally:
        child.kill()
    assert code in (0, -signal.SIGTERM), child.stderr.read()


def test_a_malformed_parent_pid_is_a_clear_error(subprocess_env):
    child = _gateway({**subprocess_env, "HEDGEROW_PARENT_PID": "self"})
    assert child.wait(60) == 2
    error = child.stderr.read()
    assert "HEDGEROW_PARENT_PID: expected int" in error and "Traceback" not in error
