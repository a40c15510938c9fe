"""ServerMetrics: recorded samples are applied before every scrape, and in bulk when many
pile up between scrapes (the list stays bounded)."""

from hedgerow.server import metrics as m


def sample(metrics: m.ServerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels or None) or 0.0


def test_recorded_samples_are_in_the_next_scrape():
    metrics = m.ServerMetrics("mini")
    metrics.record(metrics.tokens.inc, 128)
    metrics.record(metrics.request_seconds.observe, 0.002)
    assert sample(metrics, "hedgerow_server_tokens_total") == 0.0  # not applied yet
    body = metrics.render().decode()
    assert 'hedgerow_server_tokens_total{model="mini"} 128.0' in body
    assert 'hedgerow_server_request_seconds_bucket{le="0.0025"} 1.0' in body


def test_a_full_list_is_applied_without_a_scrape():
    metrics = m.ServerMetrics()
    for _ in range(m.FLUSH_AT):
        metrics.record(metrics.batch_sequences.observe, 1)
    assert sample(metrics, "hedgerow_server_batch_sequences_count") == m.FLUSH_AT
    metrics.record(metrics.batch_sequences.observe, 1)
    assert sample(metrics, "hedgerow_server_batch_sequences_count") == m.FLUSH_AT


def test_build_info_and_no_device_memory_on_cpu():
    body = m.ServerMetrics("mini").render().decode()
    assert 'hedgerow_build_info{component="server",version="' in body
    assert "device_memory" not in body


def test_device_memory_is_read_at_each_scrape():
    metrics = m.ServerMetrics("mini")
    used = [1024]
    metrics.watch_device_memory(lambda: used[0], lambda: 4096)
    assert sample(metrics, "hedgerow_server_device_memory_allocated_bytes") == 1024
    used[0] = 2048
    body = metrics.render().decode()
    assert "hedgerow_server_device_memory_allocated_bytes 2048.0" in body
    assert "hedgerow_server_device_memory_reserved_bytes 4096.0" in body
