"""Kept nodes: a RayJob's nodes held for its namespace after the run (`keep_nodes`).

`runner render` labels the worker pods of a RayJob that asks for it
(`runner.keepnodes.POD_LABEL`, seconds in `POD_SECONDS`). Every `timings.keep_period_s`
the `KeepWorkflow` runs the `keep_nodes` activity, which brings each GPU node to the state
`reconcile` (pure, table-tested) asks for:

- **watched**: such a pod runs on the node: annotation `KEEP_FOR` = `<namespace> <seconds>`.
- **kept**: the node was watched and no such pod is left: taint and label
  `platform.reve.dev/kept-for=<namespace>` (NoSchedule), annotation `KEPT_UNTIL`. Only the
  namespace's GPU pods tolerate it, and they prefer such nodes (`runner.gpupod`).
- **released** (back to plain): the time is up, or a pod of the namespace runs on the node
  again (the relaunch took it; one that asks to keep its nodes makes it watched again).

Each change is one node patch conditional on the `resourceVersion` read (a stale read is
skipped until the next round), one Event on the node and one telemetry record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import activity

from catalog import labels
from runner import keepnodes
from warden.faults import beat
from warden.kube import Conflict, NotFound, Object
from warden.model import KeepInput, KeepResult

KEEP_FOR = f"warden.{labels.DOMAIN}/keep-for"
"""`<namespace> <seconds>` on a node a pod asking `keep_nodes` runs on."""
KEPT_UNTIL = f"warden.{labels.DOMAIN}/kept-until"
"""ISO time a kept node is released."""
DONE_PHASES = ("Succeeded", "Failed")
COUNTERS = {"watch": "watched", "keep": "kept", "release": "released"}


@dataclass(frozen=True)
class Change:
    """One node patch: `action` is watch, keep or release."""

    action: str
    namespace: str
    labels: dict[str, str | None]
    annotations: dict[str, str | None]
    taints: list[Object] = field(default_factory=list)
    reason: str = ""


def active(pod: Object) -> bool:
    """A pod that holds its node: placed, not finished, not being deleted."""
    meta, status = pod["metadata"], pod.get("status") or {}
    return not meta.get("deletionTimestamp") and status.get("phase") not in DONE_PHASES


def requests(pods: list[Object]) -> dict[str, tuple[str, int]]:
    """node -> (namespace, seconds) of the active pods asking to keep their node."""
    found: dict[str, tuple[str, int]] = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        node = pod.get("spec", {}).get("nodeName")
        raw = (pod["metadata"].get("annotations") or {}).get(keepnodes.POD_SECONDS, "")
        if not node or not active(pod) or not raw.isdigit() or int(raw) <= 0:
            continue
        seconds = min(int(raw), keepnodes.MAX_SECONDS)
        namespace = pod["metadata"]["namespace"]
        current = found.get(node)
        if current is None or current[0] == namespace:  # the first namespace (sorted) wins
            found[node] = (namespace, max(seconds, current[1] if current else 0))
    return found


def kept_namespace(node: Object) -> str | None:
    return (node["metadata"].get("labels") or {}).get(keepnodes.KEPT_FOR)


def _others(node: Object) -> list[Object]:
    """The node's taints without the kept-for one."""
    return [t for t in node.get("spec", {}).get("taints") or [] if t["key"] != keepnodes.KEPT_FOR]


def _plain(node: Object) -> dict:
    return {"labels": {keepnodes.KEPT_FOR: None}, "taints": _others(node)}


def reconcile(
    node: Object, request: tuple[str, int] | None, namespace_active: bool, now: datetime
) -> Change | None:
    """The change a node needs, or None. `request`: (namespace, seconds) of a pod asking to
    keep this node; `namespace_active`: a pod of the kept namespace runs on it."""
    notes = node["metadata"].get("annotations") or {}
    kept = kept_namespace(node)
    tainted = len(_others(node)) != len(node.get("spec", {}).get("taints") or [])
    if request:
        namespace, seconds = request
        want = f"{namespace} {seconds}"
        if notes.get(KEEP_FOR) == want and not (kept or tainted or KEPT_UNTIL in notes):
            return None
        marks = {KEEP_FOR: want, KEPT_UNTIL: None}
        reason = f"keep for {namespace} {seconds}s once its pods are gone"
        return Change("watch", namespace, **_plain(node), annotations=marks, reason=reason)
    if kept or tainted or KEPT_UNTIL in notes:
        until = _time(notes.get(KEPT_UNTIL))
        if until is not None and now < until and not namespace_active and kept:
            return None
        why = "a pod of the namespace runs on it" if namespace_active else "time is up"
        marks = {KEEP_FOR: None, KEPT_UNTIL: None}
        return Change("release", kept or "", **_plain(node), annotations=marks, reason=why)
    if KEEP_FOR in notes:
        namespace, _, seconds = notes[KEEP_FOR].partition(" ")
        until = now + timedelta(seconds=int(seconds) if seconds.isdigit() else 0)
        marks = {KEEP_FOR: None, KEPT_UNTIL: until.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return Change(
            "keep",
            namespace,
            labels={keepnodes.KEPT_FOR: namespace},
            annotations=marks,
            taints=[*_others(node), keepnodes.taint(namespace)],
            reason=f"kept for {namespace} until {marks[KEPT_UNTIL]}",
        )
    return None


def _now() -> datetime:
    return datetime.now(UTC)


def _time(text: str | None) -> datetime | None:
    try:
        return datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _tracked(node: Object) -> bool:
    """The node carries a mark of ours (annotation, label or taint)."""
    notes = node["metadata"].get("annotations") or {}
    taints = node.get("spec", {}).get("taints") or []
    return bool(
        KEEP_FOR in notes
        or KEPT_UNTIL in notes
        or kept_namespace(node)
        or len(_others(node)) != len(taints)
    )


class KeepActivities:
    """Mixed into `WardenActivities` (uses its `kube`, `_emit`)."""

    def _namespace_active(self, node: str, namespace: str) -> bool:
        return any(active(p) for p in self.kube.list_pods(node=node, namespace=namespace))

    @activity.defn
    def keep_nodes(self, inp: KeepInput) -> KeepResult:
        """One round over the GPU nodes; returns how many were watched, kept, released."""
        now = _now()
        wanted = requests(self.kube.list_pods(labels={keepnodes.POD_LABEL: "true"}))
        result = KeepResult(rounds=1)
        for node in self.kube.list_nodes():
            name = node["metadata"]["name"]
            if name not in wanted and not _tracked(node):
                continue
            beat(name)
            kept = kept_namespace(node)
            busy = bool(kept) and name not in wanted and self._namespace_active(name, kept)
            change = reconcile(node, wanted.get(name), busy, now)
            if change is None:
                continue
            version = node["metadata"].get("resourceVersion")
            try:
                self.kube.set_node_keep(
                    name, change.labels, change.annotations, change.taints, version
                )
            except (Conflict, NotFound):
                continue  # changed or gone since the list: the next round looks again
            rid = f"keep-{name}-{version}"
            self._emit(node, rid, f"keep-{change.action}", change.reason, change.namespace)
            counter = COUNTERS[change.action]
            setattr(result, counter, getattr(result, counter) + 1)
        return result
