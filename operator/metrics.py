"""The operator's own Prometheus metrics: how reconciliation goes.

Owns the series (`hedgerow_operator_reconciles_total{trigger, outcome}` and
`hedgerow_operator_reconcile_seconds{trigger}`) in a registry of this process's own, and the
outcome names: `applied` (children applied, status written), `spec_rejected` (the spec cannot
be applied; the resource's conditions say why), `api_error` (the Kubernetes API failed; kopf
retries) and `error` (anything else: a bug, whose traceback is in the log). Knows nothing about
kopf or HTTP; operator/probes.py serves the text.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

OUTCOMES = ("applied", "spec_rejected", "api_error", "error")
TRIGGERS = ("event", "resync")


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "hedgerow_operator_reconciles_total",
            "Reconciliations of EmbeddingServices, by what started them (a resource event or "
            "the drift-repair timer) and how they ended.",
            ["trigger", "outcome"], registry=self.registry)
        self.reconcile_seconds = Histogram(
            "hedgerow_operator_reconcile_seconds",
            "Time one reconciliation took, whatever its outcome.", ["trigger"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=self.registry)
        for trigger in TRIGGERS:  # every series exists from the start, at 0
            for outcome in OUTCOMES:
                self.reconciles.labels(trigger, outcome)
            self.reconcile_seconds.labels(trigger)

    def observe(self, trigger: str, outcome: str, seconds: float) -> None:
        self.reconciles.labels(trigger, outcome).inc()
        self.reconcile_seconds.labels(trigger).observe(seconds)

    content_type = CONTENT_TYPE_LATEST

    def render(self) -> bytes:
        return generate_latest(self.registry)
