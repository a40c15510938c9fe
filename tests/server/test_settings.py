"""ServerSettings: flags and variables, the checks between fields, the derived defaults."""

import argparse

import pytest

from hedgerow import settings
from hedgerow.errors import ConfigError
from hedgerow.server_settings import ServerSettings


def load(*argv: str, environ=None) -> ServerSettings:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, ServerSettings)
    return settings.load(ServerSettings, parser.parse_args(list(argv)), environ or {})


def test_flags_win_over_variables_and_defaults_fill_the_rest():
    config = load("--max-batch-tokens", "512", environ={"HEDGEROW_MAX_BATCH_TOKENS": "64",
                                                        "HEDGEROW_PORT": "6000"})
    assert config.max_batch_tokens == 512 and config.port == 6000
    assert config.http_port == 9090 and config.model is None and config.dtype == "auto"


def test_a_request_limit_past_the_admission_bound_is_refused():
    with pytest.raises(ConfigError, match="could never be admitted"):
        load("--max-request-tokens", "5000", "--max-inflight-tokens", "4000")


@pytest.mark.parametrize("device", ["gpu", "cuda0", "tpu", "cuda:", "cuda:abc", "cpu:0"])
def test_unknown_devices_are_refused(device):
    with pytest.raises(ConfigError, match="not cpu, cuda or cuda:N"):
        load("--device", device)


@pytest.mark.parametrize("value", ["cpu3", "-1", "1,2", "on"])
def test_host_cpu_is_auto_off_or_a_cpu_number(value):
    assert load("--host-cpu", "off").host_cpu == "off"
    with pytest.raises(ConfigError,
                       match=f"--host-cpu: '{value}' is not auto, off or a CPU number"):
        load("--host-cpu", value)


def test_the_grpc_and_http_ports_must_differ():
    with pytest.raises(ConfigError, match="--port and --http-port must differ"):
        load("--port", "6000", "--http-port", "6000")


def test_derived_defaults_depend_on_the_device():
    assert load().overlap_depth() == 1
    assert load("--device", "cuda:1").overlap_depth() == 2
    assert load("--inflight-batches", "3").overlap_depth() == 3
    assert load("--cpu-threads", "3").torch_threads() == 3
    assert load().torch_threads() >= 1


def test_out_of_range_values_name_the_flag():
    with pytest.raises(ConfigError, match="--max-batch-seqs: 0 is below the minimum"):
        load("--max-batch-seqs", "0")
    with pytest.raises(ConfigError, match="--dtype: 'int8' is not one of"):
        load("--dtype", "int8")


def test_bad_graph_settings_fail_at_start_on_cpu_too(subprocess_env):
    import subprocess

    from tests.conftest import hedgerow_command

    done = subprocess.run(hedgerow_command("server", "--graph-hot-set", "zz"), env=subprocess_env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "graph hot set entry 'zz' must look like SEQSxTOKENS" in done.stderr
    assert "server.listening" not in done.stderr
    done = subprocess.run(hedgerow_command("server", "--graph-seq-buckets", "1,abc"),
                          env=subprocess_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--graph-seq-buckets: expected int, got 'abc'" in done.stderr


def test_the_server_permits_the_gateways_keepalive_pings():
    """grpc's default server policy (one ping per 5 minutes without data) answers a gateway's
    10 s keepalive with GOAWAY too_many_pings, and the gateway drops the replica briefly."""
    from hedgerow.gateway.replicas import CHANNEL_OPTIONS
    from hedgerow.server.app import grpc_options

    server = dict(grpc_options(load()))
    client = dict(CHANNEL_OPTIONS)
    assert server["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.http2.min_ping_interval_without_data_ms"] <= (
        client["grpc.keepalive_time_ms"])


def test_every_grpc_option_we_set_is_one_grpc_knows():
    """grpc ignores an unknown option silently: a misspelt ping option left the gateway's
    replicas dropping every few minutes. Each name must appear in grpc's own core library."""
    from pathlib import Path

    import grpc

    from hedgerow.gateway.replicas import CHANNEL_OPTIONS
    from hedgerow.server.app import grpc_options

    core = b"".join(path.read_bytes() for path in
                    (Path(grpc.__file__).parent / "_cython").glob("cygrpc*.so"))
    assert core, "grpc's core library not found"
    for name, _ in [*grpc_options(load()), *CHANNEL_OPTIONS]:
        assert name.encode() + b"\x00" in core, f"grpc does not know the option {name!r}"
