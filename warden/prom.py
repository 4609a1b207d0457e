"""GPU telemetry from the DCGM exporter, read through Prometheus's HTTP query API.

`HttpPrometheus(url).gpu_telemetry()` runs one instant PromQL query per signal and returns a
`GpuTelemetry` per node; `warden.fakefleet.FakePrometheus` serves the same from the fake store.
The node label is the one the DCGM exporter sets (`Hostname` by default, configurable).

    python -c "from warden.prom import HttpPrometheus; print(HttpPrometheus('http://prom:9090').gpu_telemetry())"
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from typing import Protocol

from warden.rules import GpuTelemetry

NVLINK_ERRORS = "DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_TOTAL"


class Prometheus(Protocol):
    def gpu_telemetry(self) -> dict[str, GpuTelemetry]:
        """Figures per node over the query window; healthy nodes may be absent."""
        ...


def queries(node_label: str, window: str) -> dict[str, str]:
    """GpuTelemetry field -> PromQL instant query (one series per node, or per GPU for XIDs)."""
    by = f"by ({node_label})"
    return {
        "xids": f"max by ({node_label}, gpu) (max_over_time(DCGM_FI_DEV_XID_ERRORS[{window}])) > 0",
        "ecc_dbe": f"sum {by} (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{window}])) > 0",
        "row_remap_failures": (
            f"max {by} (max_over_time(DCGM_FI_DEV_ROW_REMAP_FAILURE[{window}])) > 0"
        ),
        "nvlink_errors": f'sum {by} (increase({{__name__=~"{NVLINK_ERRORS}"}}[{window}])) > 0',
        "thermal_violation_s": (
            f"max {by} (increase(DCGM_FI_DEV_THERMAL_VIOLATION[{window}])) / 1e6 > 0"
        ),
    }


def merge(results: dict[str, list[dict]], node_label: str) -> dict[str, GpuTelemetry]:
    """Fold the vector results of `queries()` into one GpuTelemetry per node."""
    nodes: dict[str, GpuTelemetry] = {}
    for name, samples in results.items():
        for sample in samples:
            node = sample.get("metric", {}).get(node_label)
            value = float(sample["value"][1])
            if not node or math.isnan(value):
                continue
            gpu = nodes.setdefault(node, GpuTelemetry())
            if name == "xids":
                gpu.xids = sorted(set(gpu.xids) | {int(value)})
            else:
                setattr(gpu, name, getattr(gpu, name) + value)
    return nodes


class PromError(Exception):
    """Prometheus could not be reached or refused a query."""


class HttpPrometheus:
    """Prometheus HTTP API client (`/api/v1/query`), standard library only."""

    def __init__(self, url: str, node_label: str = "Hostname", window: str = "10m", timeout=30):
        self.url = url.rstrip("/")
        self.node_label = node_label
        self.window = window
        self.timeout = timeout

    def query(self, promql: str) -> list[dict]:
        """One instant query; the `result` list of its vector."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                body = json.load(response)
        except (OSError, ValueError) as err:
            raise PromError(f"{self.url}: {err}") from err
        if body.get("status") != "success":
            raise PromError(f"{self.url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def gpu_telemetry(self) -> dict[str, GpuTelemetry]:
        results = {
            name: self.query(promql)
            for name, promql in queries(self.node_label, self.window).items()
        }
        return merge(results, self.node_label)
