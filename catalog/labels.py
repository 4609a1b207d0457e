"""Names shared by every part: label keys, taints, priority classes, queue names.

One place each constant lives. `runner` renders them, `infra` puts them on node pools,
`kustomize/` declares the objects they name (a test cross-checks the three).
"""

from __future__ import annotations

DOMAIN = "platform.reve.dev"

# The run identity: the same labels on every manifest, metric, log line and checkpoint path.
RUN = f"{DOMAIN}/run"
TEAM = f"{DOMAIN}/team"
CLUSTER = f"{DOMAIN}/cluster"
TYPE = f"{DOMAIN}/type"
ROLE = f"{DOMAIN}/role"  # head, worker, sentinel, job
# A DiLoCo experiment's objects (runner.experiment): the experiment and the learner (or
# `synchronizer`) on top of the run labels.
EXPERIMENT = f"{DOMAIN}/experiment"
LEARNER = f"{DOMAIN}/learner"
SYNCHRONIZER = "synchronizer"  # the LEARNER label value of a synchronizer's objects
MANAGED_BY = "app.kubernetes.io/managed-by"
# Environment variable every run and check container gets from the downward API
# (spec.nodeName): preflight reports and the driver's metric rows name the node with it.
NODE_NAME_ENV = "NODE_NAME"
# NCCL Inspector's dump folder on a GPU run pod: the catalog's host folder (hostPath,
# DirectoryOrCreate), mounted with this subPathExpr so each pod writes only its own
# `<namespace>/<pod>` folder (downward API env), which Fluent Bit's path pattern reads.
POD_NAMESPACE_ENV, POD_NAME_ENV = "POD_NAMESPACE", "POD_NAME"
INSPECTOR_VOLUME = "nccl-inspector"
INSPECTOR_SUB_PATH = f"$({POD_NAMESPACE_ENV})/$({POD_NAME_ENV})"
MANAGED_BY_VALUE = "runner"

# Node labels GKE sets and node labels our node pools add.
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_NODEPOOL = "cloud.google.com/gke-nodepool"
GKE_RESERVATION = "cloud.google.com/reservation-name"
GKE_SPOT = "cloud.google.com/gke-spot"
TOPOLOGY_BLOCK = "cloud.google.com/gce-topology-block"
TOPOLOGY_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
TOPOLOGY_HOST = "cloud.google.com/gce-topology-host"
HOSTNAME = "kubernetes.io/hostname"  # the node's name (a relaunch's avoided nodes)
POOL_ROLE = f"{DOMAIN}/pool"  # "cpu" or "gpu"
RESOURCE_GROUP = f"{DOMAIN}/resource-group"

# Taints: GPU nodes carry the GPU taint; spot nodes the spot taint.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SPOT_TAINT = {"key": GKE_SPOT, "value": "true", "effect": "NoSchedule"}

# Priority classes (declared in kustomize/bases/priority-classes).
PRIORITY_PREEMPTIBLE = "training-preemptible"
PRIORITY_DEFAULT = "training-default"
PRIORITY_HIGH = "training-high"
PRIORITY_VALUES = {PRIORITY_PREEMPTIBLE: 1000, PRIORITY_DEFAULT: 10000, PRIORITY_HIGH: 100000}

# Kueue: one LocalQueue per team namespace, named the same everywhere.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE = "training"

# Warden's node annotations.
WARDEN_CORDONS = f"warden.{DOMAIN}/cordon-count"
WARDEN_LAST_CORDON = f"warden.{DOMAIN}/last-cordon"
WARDEN_REASON = f"warden.{DOMAIN}/reason"


def run_labels(run: str, team: str, cluster: str, kind: str) -> dict[str, str]:
    """The identity labels every object of a run carries."""
    return {
        CLUSTER: cluster,
        MANAGED_BY: MANAGED_BY_VALUE,
        RUN: run,
        TEAM: team,
        TYPE: kind,
    }


def gpu_node_labels(resource_group: str) -> dict[str, str]:
    """Labels our GPU node pools add (GKE adds the accelerator label itself)."""
    return {POOL_ROLE: "gpu", RESOURCE_GROUP: resource_group}


def cpu_node_labels() -> dict[str, str]:
    return {POOL_ROLE: "cpu"}


# Secrets the platform makes in every team namespace (kustomize's secret-maker Job) and
# run pods reference by name, never by value: (Secret name, key).
CHECKPOINT_KEY_SECRET = ("checkpoint-key", "key")
CHECKPOINT_KEY_ENV = "REVE_CHECKPOINT_KEY"  # the driver signs and checks checkpoints with it
RAY_TOKEN_SECRET = ("ray-token", "auth_token")  # Ray's token auth (KubeRay authOptions)
# The driver's ClickHouse sign-in (logging.clickhouse_url): the `runs` user (insert into
# platform.run_metrics only) and its password from this Secret, as these env variables.
CLICKHOUSE_RUNS_SECRET = ("clickhouse-runs", "password")
CLICKHOUSE_RUNS_USER = "runs"
CLICKHOUSE_USER_ENV, CLICKHOUSE_PASSWORD_ENV = "CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD"
# The platform's ClickHouse HTTP endpoint inside every cluster (kustomize/bases/observability).
CLICKHOUSE_URL = "http://clickhouse.observability.svc:8123"
# The platform's OpenTelemetry collector (OTLP/HTTP) inside every cluster: rendered runs
# export their metrics and every process's log lines there (kustomize/bases/observability).
OTEL_COLLECTOR_URL = "http://otel-collector.observability.svc:4318"

# Kubernetes service accounts bound to Google service accounts (Workload Identity).
TRAINING_KSA = "training"  # in every team namespace; run pods use it for bucket access
WARDEN_KSA = ("warden", "warden")  # (namespace, name)
OBSERVABILITY_KSA = ("observability", "collector")


# The telemetry label set: every metric row, log line and event the platform emits carries
# these keys (values are strings; "" where a label does not apply, e.g. `worker` on a
# training rank). `OTEL_ATTRIBUTES` names each as an OpenTelemetry resource attribute: the
# semantic conventions' name where one exists, else `reve.<label>`.
CLUSTER_LABEL, TEAM_LABEL, RUN_LABEL, LEARNER_LABEL = "cluster", "team", "run", "learner"
ATTEMPT_LABEL, NODE_LABEL, POD_LABEL, RANK_LABEL = "attempt", "node", "pod", "rank"
WORKER_LABEL, SERVICE_LABEL = "worker", "service"
TELEMETRY_LABELS = (CLUSTER_LABEL, TEAM_LABEL, RUN_LABEL, LEARNER_LABEL, ATTEMPT_LABEL,
                    NODE_LABEL, POD_LABEL, RANK_LABEL, WORKER_LABEL, SERVICE_LABEL)  # fmt: skip
OTEL_ATTRIBUTES = {
    CLUSTER_LABEL: "k8s.cluster.name",
    TEAM_LABEL: "k8s.namespace.name",  # a team is its namespace
    RUN_LABEL: "reve.run",
    LEARNER_LABEL: "reve.learner",
    ATTEMPT_LABEL: "reve.attempt",
    NODE_LABEL: "k8s.node.name",
    POD_LABEL: "k8s.pod.name",
    RANK_LABEL: "reve.rank",
    WORKER_LABEL: "service.instance.id",
    SERVICE_LABEL: "service.name",
}
TRAIN_SERVICE = "train"  # the `service` of training ranks and the driver


def telemetry_labels(**values) -> dict[str, str]:
    """The full label set, every key present, values as strings (unknown keys refused)."""
    unknown = set(values) - set(TELEMETRY_LABELS)
    if unknown:
        raise KeyError(f"not telemetry labels: {sorted(unknown)}")
    return {key: "" if values.get(key) is None else str(values[key]) for key in TELEMETRY_LABELS}


def otel_attributes(values: dict[str, str]) -> dict[str, str]:
    """The label set as OpenTelemetry resource attributes (empty labels left out)."""
    return {
        OTEL_ATTRIBUTES[k]: str(v) for k, v in values.items() if k in OTEL_ATTRIBUTES and v != ""
    }
