"""The EmbeddingService CRD's `spec.autoscaling`: fields, defaults and cross-field rules.

Owns the autoscaling block that operator/crd.py places in the spec (kept here, apart from the
rest of the schema). The defaults follow `hedgerow bench autoscale` (docs/operator.md,
"Autoscaling on token throughput"): the `offered` signal and a scale-up of up to 400 % a
minute reach enough replicas for a 5x surge within one sync, the start and the rate window;
`served` saturates at the fleet's capacity and takes twice as long. Knows nothing about HPAs
or ScaledObjects (build_scaling.py, build_keda.py).
"""

from hedgerow.operator import token_signals
from hedgerow.operator.schema import boolean, integer, obj, rule, string

ENGINES = ("hpa", "keda")
METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"

AUTOSCALING = obj(
    {
        "enabled": boolean("Scale servers on token throughput; `server.replicas` is then "
                           "ignored.", default=False),
        "engine": string("What scales them: hpa (an autoscaling/v2 HPA reading the metric "
                         "prometheus-adapter exposes, the chart's rules) or keda (a KEDA "
                         "ScaledObject whose Prometheus trigger sends the same query to "
                         "prometheusAddress, with the same target and behavior).",
                         default="hpa", enum=ENGINES),
        "signal": string("The token rate that decides: offered (the gateways' "
                         "hedgerow_gateway_offered_tokens_total, every request that reached "
                         "admission, admitted or refused) or served (the servers' "
                         "hedgerow_server_tokens_total, which saturates at the fleet's "
                         "capacity, so a surge is seen one step of replicas at a time).",
                         default="offered", enum=tuple(token_signals.SIGNALS)),
        "minReplicas": integer("Fewest server replicas.", default=1, minimum=1, maximum=1000),
        "maxReplicas": integer("Most server replicas.", default=4, minimum=1, maximum=1000),
        "targetTokensPerSecond": integer("Tokens per second one server replica should carry; "
                                         "replicas = total token rate / this. About 0.7 of "
                                         "what one replica serves at saturation "
                                         "(docs/benchmarks.md) leaves room for a surge.",
                                         default=100000, minimum=1, maximum=1000000000),
        "metricName": string("With engine hpa, the custom metric the HPA reads (the name in "
                             "the chart's prometheus-adapter rules). Default: "
                             f"{token_signals.OFFERED.metric} for signal offered, "
                             f"{token_signals.SERVED.metric} for served.",
                             min_length=1, max_length=253, pattern=METRIC_NAME),
        "prometheusAddress": string("With engine keda, the Prometheus that KEDA's trigger "
                                    "queries (e.g. http://prometheus-operated.monitoring:9090).",
                                    pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=1024),
        "scaleUpStabilizationSeconds": integer("HPA scale-up stabilization window.",
                                               default=0, minimum=0, maximum=3600),
        "scaleDownStabilizationSeconds": integer("HPA scale-down stabilization window.",
                                                 default=300, minimum=0, maximum=3600),
        "scaleUpPodsPerMinute": integer("Most server pods added per minute (or more, by "
                                        "scaleUpPercentPerMinute).", default=4,
                                        minimum=1, maximum=1000),
        "scaleUpPercentPerMinute": integer("Most growth per minute as a percentage of the "
                                           "replicas at the minute's start (or more, by "
                                           "scaleUpPodsPerMinute): 400 lets a 5x surge be met "
                                           "in one step.", default=400, minimum=1,
                                           maximum=10000),
        "scaleDownPodsPerMinute": integer("Most server pods removed per minute.", default=1,
                                          minimum=1, maximum=1000),
    },
    "Token-throughput autoscaling of the servers.",
    default={},
    rules=(rule("self.minReplicas <= self.maxReplicas",
                "autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
           rule("self.engine != 'keda' || has(self.prometheusAddress)",
                "autoscaling.engine keda needs autoscaling.prometheusAddress, the Prometheus "
                "its trigger queries"),
           rule("self.engine == 'keda' || !has(self.prometheusAddress)",
                "autoscaling.prometheusAddress is for engine keda; with engine hpa the metric "
                "comes from prometheus-adapter"),
           rule("self.engine == 'hpa' || !has(self.metricName)",
                "autoscaling.metricName names prometheus-adapter's metric, which engine keda "
                "does not read")),
)


# spec.gateway.autoscaling: the gateways do the CPU work (tokenization), so CPU is their signal.
GATEWAY_AUTOSCALING = obj(
    {
        "enabled": boolean("Scale gateways with an autoscaling/v2 HPA on CPU utilization; "
                           "`gateway.replicas` is then ignored.", default=False),
        "minReplicas": integer("Fewest gateway replicas.", default=2, minimum=1, maximum=1000),
        "maxReplicas": integer("Most gateway replicas.", default=10, minimum=1, maximum=1000),
        "targetCPUUtilizationPercent": integer(
            "Average CPU use of the gateway pods, as a percentage of their CPU request "
            "(gateway.cpu), that the HPA keeps them at.", default=70, minimum=1,
            maximum=1000),
    },
    "CPU autoscaling of the gateways (off by default).",
    default={},
    rules=(rule("self.minReplicas <= self.maxReplicas",
                "gateway.autoscaling.minReplicas must not exceed "
                "gateway.autoscaling.maxReplicas"),),
)
