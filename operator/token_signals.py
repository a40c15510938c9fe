"""The token-rate signals autoscaling reads, and the PromQL that reads them, in one place.

Owns, for each signal, the Prometheus counter it comes from, the component whose Service the
metric hangs on, the custom metric's default name, and the query: the chart's
prometheus-adapter rules (charts/hedgerow/templates/prometheus-adapter-rules.yaml, a test keeps
them equal to METRICS_QUERY and SERIES_QUERIES) and the KEDA trigger (build_keda.py) both read
the rate through `adapter_query`, which fills the rule's template as prometheus-adapter fills it.
Knows nothing about HPAs, ScaledObjects or the CRD.

- `served`: `hedgerow_server_tokens_total` of the *servers* (tokens the engines ran), summed
  over the pods behind the server headless Service `<name>-server`. It saturates at the fleet's
  capacity: under a surge it reads what the fleet managed, not what was asked.
- `offered`: `hedgerow_gateway_offered_tokens_total` of the *gateways* (tokens of every
  embedding request that reached admission, admitted or refused with 429), summed over the pods
  behind the gateway Service `<name>`. It sees a surge in full, before any server has joined.

Each component's metrics have names of their own (`hedgerow_server_*`, `hedgerow_gateway_*`),
so a signal's series query names exactly one component's counter, and `service` only says which
fleet's pods it sums.
"""

import dataclasses
from typing import Literal, Sequence

SignalName = Literal["offered", "served"]

# The rate window of every token query (prometheus-adapter's rule, KEDA's trigger, the
# recording rules): the HPA sees a change in full one window after it happens.
RATE_WINDOW = "1m"
RATE_WINDOW_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class Signal:
    name: SignalName
    counter: str           # the Prometheus counter (with its _total suffix)
    metric: str            # the custom metric prometheus-adapter exposes (rule `name.as`)
    component: Literal["gateway", "server"]  # whose Service describes the metric
    series_query: str      # the adapter rule's seriesQuery: which series it discovers

    def service_name(self, resource_name: str) -> str:
        """The Service the HPA's Object metric is attached to, for EmbeddingService
        `resource_name` (names.server_name / gateway_service_name)."""
        return f"{resource_name}-server" if self.component == "server" else resource_name


SERVED = Signal("served", "hedgerow_server_tokens_total", "hedgerow_tokens_per_second",
                "server", 'hedgerow_server_tokens_total{namespace!="",service!=""}')
OFFERED = Signal("offered", "hedgerow_gateway_offered_tokens_total",
                 "hedgerow_offered_tokens_per_second", "gateway",
                 'hedgerow_gateway_offered_tokens_total{namespace!="",service!=""}')
SIGNALS: dict[str, Signal] = {signal.name: signal for signal in (OFFERED, SERVED)}

# The adapter rule's metricsQuery (prometheus-adapter's Go template, `<<` `>>` delimiters).
METRICS_QUERY = f"sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{RATE_WINDOW}])) by (<<.GroupBy>>)"


def _quoted(value: str) -> str:
    # Go's %q for the label values that can occur here (names, namespaces, regexes).
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def adapter_query(template: str, series: str, namespace: str, resource_label: str,
                  names: Sequence[str]) -> str:
    """`template` filled as prometheus-adapter fills it for an Object metric of namespaced
    objects `names` (pkg/naming/metrics_query.go, `Build`, with no metric selector):
    LabelMatchers `namespace="NS",LABEL="NAME"` (`LABEL=~"A|B"` for several names), GroupBy
    the resource's label. Only the three fields this project's rules use are filled; any
    other field is an error, as in the adapter's template."""
    if not names:
        raise ValueError("prometheus-adapter asks for at least one object")
    target = "|".join(names)
    operator = "=~" if len(names) > 1 else "="
    matchers = f"namespace={_quoted(namespace)},{resource_label}{operator}{_quoted(target)}"
    filled = (template.replace("<<.Series>>", series)
              .replace("<<.LabelMatchers>>", matchers)
              .replace("<<.GroupBy>>", resource_label))
    if "<<" in filled:
        raise ValueError(f"unsupported field in the metrics query template: {template!r}")
    return filled


def query(signal: Signal, namespace: str, resource_name: str) -> str:
    """The PromQL the HPA's metric comes from for one EmbeddingService: what prometheus-adapter
    sends for the Object metric on `signal.service_name(resource_name)`, and what KEDA's
    Prometheus trigger sends itself."""
    return adapter_query(METRICS_QUERY, signal.counter, namespace, "service",
                         [signal.service_name(resource_name)])
