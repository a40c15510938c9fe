"""`hedgerow gateway` and `hedgerow serve` refuse bad configuration with one clear line."""

import socket
import subprocess

import pytest

from tests.conftest import hedgerow_command


def run(args, env, timeout=60):
    return subprocess.run(hedgerow_command(*args), env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_gateway_without_servers_says_how_to_give_them(subprocess_env):
    done = run(["gateway"], subprocess_env)
    assert done.returncode == 2
    assert "--servers host:port" in done.stderr and "Traceback" not in done.stderr


def test_gateway_rejects_a_malformed_address(subprocess_env):
    done = run(["gateway", "--servers", "localhost"], subprocess_env)
    assert done.returncode == 2 and "is not host:port" in done.stderr


def test_settings_come_from_environment_variables_too(subprocess_env):
    done = run(["gateway"], {**subprocess_env, "HEDGEROW_SERVERS": "a:1",
                             "HEDGEROW_SERVICE_DNS": "b:2"})
    assert done.returncode == 2 and "not both" in done.stderr


def test_a_taken_port_is_a_clear_error_for_gateway_and_serve(subprocess_env):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        done = run(["gateway", "--servers", "127.0.0.1:1", "--port", port], subprocess_env)
        assert done.returncode == 2 and "cannot listen on" in done.stderr
        assert "is another process using it?" in done.stderr
        done = run(["serve", "--port", port], subprocess_env)
        assert done.returncode == 2 and "is in use" in done.stderr
        assert "starting the server" not in done.stderr  # nothing was started


@pytest.mark.parametrize("host, says", [
    ("::1::", "--host ::1::: cannot resolve it"),
    ("192.0.2.7", "cannot listen on 192.0.2.7:"),  # an address on no machine
])
def test_a_bad_host_is_named_without_a_port_hint(subprocess_env, host, says):
    done = run(["gateway", "--servers", "127.0.0.1:1", "--host", host], subprocess_env)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "--port" not in done.stderr and "Traceback" not in done.stderr


def test_help_lists_every_flag_with_its_variable(subprocess_env):
    done = run(["gateway", "--help"], subprocess_env)
    assert done.returncode == 0
    for flag in ("--chunk-tokens", "--service-dns", "--api-keys-file", "--truncate"):
        assert flag in done.stdout
    assert "HEDGEROW_CHUNK_TOKENS" in done.stdout


def test_the_gateway_never_loads_torch_or_the_engine(subprocess_env):
    """Transitively, not just by its own import lines: the gateway image has no torch."""
    import sys

    code = ("import sys, hedgerow.gateway.main, hedgerow.gateway.app; "
            "bad = [m for m in ('torch', 'hedgerow.engine', 'hedgerow.server', "
            "'sentence_transformers', 'transformers') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-P", "-c", code], env=subprocess_env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_serve_names_a_bad_host_or_clashing_ports_instead_of_a_busy_port(subprocess_env):
    done = run(["serve", "--host", "999.0.0.1"], subprocess_env)
    assert done.returncode == 2 and "--host 999.0.0.1: cannot resolve it" in done.stderr
    done = run(["serve", "--port", "47100", "--server-port", "47100"], subprocess_env)
    assert done.returncode == 2 and "must differ" in done.stderr
    assert "Traceback" not in done.stderr and "starting the server" not in done.stderr
