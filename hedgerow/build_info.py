"""`hedgerow_build_info`, the one metric name every Hedgerow process exports with one meaning.

Owns its name, help and labels: `component` (gateway or server) and `version`, value 1, as
Prometheus' own `prometheus_build_info` does, so a query joins a version onto any series of
the same pod. Imported by the components that export metrics (prometheus-client is theirs).
"""

from prometheus_client import CollectorRegistry, Gauge

from hedgerow import __version__


def build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """Register `hedgerow_build_info{component, version} 1` on `registry`."""
    info = Gauge("hedgerow_build_info", "1, labelled with the Hedgerow version this process "
                 "runs and which component it is (gateway or server).",
                 ("component", "version"), registry=registry, multiprocess_mode="max")
    info.labels(component, __version__).set(1)
    return info
