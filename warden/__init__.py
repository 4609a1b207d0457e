"""Warden: automatic repair of GPU nodes with Temporal workflows, one workflow per node.

Detection (DCGM metrics from Prometheus, node conditions, node readiness) classifies each
node's faults with the pure rules in `warden.rules`; a definite fault cordons the node at
once, an ambiguous one runs the node check Job first. Cordoned nodes are drained (only
preemptible single-node jobs, after a grace period), rebooted, stress-tested with DCGM diag
and uncordoned, or escalated to GCP. Run it with `warden worker --config FILE`; see
docs/warden.md.
"""
