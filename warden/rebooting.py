"""Activities on a node's VM: reboot it, watch it boot, hand it to GCP (escalate).

`reboot` resets the VM through Compute Engine only while Warden still cordons the node and
no workload is left on it (`inspect`: blocking, drainable or terminating); the node's
`REBOOT` annotation records the remediation id and the boot id it replaces, and the reset
is keyed by the remediation id (`warden.gcp.request_id`), so a retried attempt never resets
twice. `boot_state` compares the boot id with the recorded one. `escalate` asks GCP to
repair the VM, with its own marker (`ESCALATED`). Mixed into `WardenActivities`, which
provides `_node` and `_emit`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity

from catalog import labels
from warden import annotations as ann
from warden import rules
from warden.gcp import Instance, request_id
from warden.kube import Object, resource_version
from warden.model import ActionResult, BootState, NodeAction


def _now() -> datetime:
    return datetime.now(UTC)


def _boot_id(node: Object) -> str:
    return node["status"].get("nodeInfo", {}).get("bootID", "")


class RebootActivities:
    def _instance(self, node: Object) -> Instance:
        node_labels = node["metadata"].get("labels") or {}
        return Instance(
            project=self.settings.project,
            zone=node_labels.get("topology.kubernetes.io/zone", ""),
            name=node["metadata"]["name"],
            pool=node_labels.get(labels.GKE_NODEPOOL, ""),
        )

    @activity.defn
    def reboot(self, inp: NodeAction) -> ActionResult:
        node = self._node(inp.node)
        marker = (node["metadata"].get("annotations") or {}).get(ann.REBOOT, "")
        if marker.split(" ")[0] != inp.remediation_id:
            if not rules.cordoned_by_warden(rules.node_facts(node, _now())):
                return ActionResult(inp.node, False, "released")  # uncordoned meanwhile
            report = self.inspect(NodeAction(inp.node, inp.remediation_id))
            if report.blocking or report.drainable or report.terminating:
                return ActionResult(inp.node, False, "busy")
            marker = {ann.REBOOT: f"{inp.remediation_id} {_boot_id(node)}"}
            node = self.kube.patch_node(inp.node, None, marker, resource_version(node))
        self.gcp.reset(self._instance(node), request_id(inp.remediation_id, "reset"))
        self._emit(node, inp.remediation_id, "reboot", inp.reason, warning=True)
        return ActionResult(inp.node, True)

    @activity.defn
    def boot_state(self, inp: NodeAction) -> BootState:
        node = self._node(inp.node)
        marker = (node["metadata"].get("annotations") or {}).get(ann.REBOOT, "")
        before = marker.split(" ")[1] if " " in marker else ""
        boot = _boot_id(node)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node["status"].get("conditions", [])
        )
        return BootState(inp.node, bool(before) and boot != before, ready)

    @activity.defn
    def escalate(self, inp: NodeAction) -> ActionResult:
        """Hand the VM to GCP. The marker keeps the boot id from before the repair: once the
        node boots anew (GCP moved or recreated it), the recovery sweep stress-tests it."""
        node = self._node(inp.node)
        marker = (node["metadata"].get("annotations") or {}).get(ann.ESCALATED, "")
        changed = marker.split(" ")[0] != inp.remediation_id
        if changed:
            mark = {ann.ESCALATED: f"{inp.remediation_id} {_boot_id(node)}"}
            node = self.kube.patch_node(inp.node, None, mark, resource_version(node))
        repair_id = request_id(inp.remediation_id, "repair")
        detail = self.gcp.repair(self._instance(node), inp.reason, repair_id)
        self._emit(node, inp.remediation_id, "escalate", inp.reason, detail, warning=True)
        return ActionResult(inp.node, changed, detail)
