"""OpenTelemetry export of the run's metrics to the platform's collector (OTLP over HTTP,
`logging.otel_endpoint`, e.g. http://otel-collector.observability:4318).

Each platform metric (driver.metrics.names) is a gauge under its OpenTelemetry name and UCUM
unit (`train.step.duration`, `s`); the run's identity is the resource (`k8s.cluster.name`,
`k8s.namespace.name`, `reve.run`, `service.name`), each data point carries the rank's labels
(`reve.rank`, `reve.attempt`, `k8s.pod.name`, `k8s.node.name`). A periodic reader exports the
newest value per series every `interval_s`: OpenTelemetry gets a sampled view, ClickHouse and
the chDB store every step. Export errors are the SDK's to log; training never waits on them.
"""

from __future__ import annotations

from catalog import labels
from driver.metrics.names import spec

RESOURCE_LABELS = (labels.CLUSTER_LABEL, labels.TEAM_LABEL, labels.RUN_LABEL,
                   labels.LEARNER_LABEL, labels.SERVICE_LABEL)  # fmt: skip


def metrics_url(endpoint: str) -> str:
    """The OTLP/HTTP metrics URL of a collector endpoint (a full `/v1/metrics` URL kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/metrics") else endpoint + "/v1/metrics"


class OtelWriter:
    """Gauges per platform metric, exported to `endpoint` (see the module docstring)."""

    def __init__(self, endpoint: str, identity: dict, interval_s: float = 5.0):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        tags = labels.telemetry_labels(**{k: identity.get(k) for k in RESOURCE_LABELS})
        if not tags[labels.SERVICE_LABEL]:
            tags[labels.SERVICE_LABEL] = labels.TRAIN_SERVICE
        exporter = OTLPMetricExporter(endpoint=metrics_url(endpoint), timeout=5)
        self.reader = PeriodicExportingMetricReader(exporter, int(interval_s * 1000))
        resource = Resource.create(labels.otel_attributes(tags))
        self.provider = MeterProvider(resource=resource, metric_readers=[self.reader])
        self.meter = self.provider.get_meter("driver.metrics")
        self.gauges: dict[str, object] = {}

    def gauge(self, name: str):
        metric = spec(name)
        if metric is None:
            return None
        if metric.otel not in self.gauges:
            self.gauges[metric.otel] = self.meter.create_gauge(
                metric.otel, unit=metric.unit, description=metric.help
            )
        return self.gauges[metric.otel]

    def write(self, rows: list[dict], labelled: list[dict], values) -> None:
        for row, tags in zip(rows, labelled, strict=True):
            point = labels.otel_attributes(
                {k: v for k, v in tags.items() if k not in RESOURCE_LABELS}
            )
            for name, value in values(row).items():
                gauge = self.gauge(name)
                if gauge is None:
                    continue
                aux = {"reve.aux.service": name.split("/")[1]} if name.startswith("aux/") else {}
                gauge.set(float(value), {**point, **aux})

    def close(self) -> None:
        self.provider.shutdown()  # exports what is left
