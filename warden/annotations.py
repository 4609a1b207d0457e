"""Node annotation keys Warden writes.

The three shared ones (count of recent cordons, time of the last cordon, reason) live in
`catalog.labels`; the rest are Warden's own bookkeeping for idempotent activities.
"""

from __future__ import annotations

from catalog import labels

CORDONS = labels.WARDEN_CORDONS
LAST_CORDON = labels.WARDEN_LAST_CORDON
REASON = labels.WARDEN_REASON

_PREFIX = f"warden.{labels.DOMAIN}"
REMEDIATION = f"{_PREFIX}/remediation"
"""run id of the remediation that cordoned the node (a retried cordon sees it and stops)."""
REBOOT = f"{_PREFIX}/reboot"
"""`<remediation id> <boot id before the reboot>`: a retried reboot never resets twice."""
ESCALATED = f"{_PREFIX}/escalated"
"""`<remediation id> <boot id before the repair>` of the remediation that handed the node to
GCP; the recovery sweep leaves the node alone until it boots anew (GCP repaired it)."""
CLEARED = f"{_PREFIX}/cleared"
"""time a node check last cleared the node; ambiguous findings are quiet for a while."""
REPAIRED = f"{_PREFIX}/repaired"
"""time Warden last uncordoned the node after a repair; older DCGM figures are ignored."""

# Labels on the Jobs Warden starts (node check, DCGM diag), so a sweep can find them.
JOB_NODE = f"{_PREFIX}/node"
JOB_KIND = f"{_PREFIX}/job"

# On a RayCluster Warden shrank: what each worker group had before (JSON), so a grow
# restores it when capacity returns and never goes above (warden.kuberay).
SHRUNK = f"{_PREFIX}/shrunk"
