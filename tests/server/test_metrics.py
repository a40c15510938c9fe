"""ServerMetrics: recorded samples are applied before every scrape, and in bulk when many
pile up between scrapes (the list stays bounded)."""

from hedgerow.server import metrics as m


def sample(metrics: m.ServerMetrics, name: str) -> float:
    return metrics.registry.get_sample_value(name) or 0.0


def test_recorded_samples_are_in_the_next_scrape():
    metrics = m.ServerMetrics()
    metrics.record(metrics.tokens.inc, 128)
    metrics.record(metrics.request_seconds.observe, 0.002)
    assert sample(metrics, "hedgerow_tokens_total") == 0.0  # not applied yet
    body = metrics.render().decode()
    assert "hedgerow_tokens_total 128.0" in body
    assert 'hedgerow_request_seconds_bucket{le="0.0025"} 1.0' in body


def test_a_full_list_is_applied_without_a_scrape():
    metrics = m.ServerMetrics()
    for _ in range(m.FLUSH_AT):
        metrics.record(metrics.batch_sequences.observe, 1)
    assert sample(metrics, "hedgerow_batch_sequences_count") == m.FLUSH_AT
    metrics.record(metrics.batch_sequences.observe, 1)
    assert sample(metrics, "hedgerow_batch_sequences_count") == m.FLUSH_AT
