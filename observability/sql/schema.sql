-- The platform's telemetry schema: run metrics, node events and NCCL collective records.
-- Run by the ClickHouse server at first start (/docker-entrypoint-initdb.d) and by
-- tests/kustomize/test_observability.py in chDB. Every statement is idempotent.
-- The run identity (cluster, team, run, learner) is the same on every row as on every
-- manifest label (catalog/labels.py) and checkpoint path.
-- Migrations: CREATE ... IF NOT EXISTS never changes an existing table, so a column added
-- since the first release is also added by an `ALTER TABLE ... ADD COLUMN IF NOT EXISTS`
-- right after its table's CREATE (at the place the CREATE gives it), and a changed view's
-- query is set again (`MODIFY QUERY`). On an up-to-date server they change nothing. They run
-- with the rest of this file: at a server's first start, whenever a chDB store opens it, and
-- on a running server with `clickhouse-client --multiquery < schema.sql` (docs/platform.md).

CREATE DATABASE IF NOT EXISTS platform;

-- One scalar per (run, attempt, rank, step, name): step time, loss, throughput, aux-service
-- queue depths. Names: `train/step_time_s`, `train/loss`, `train/tokens_per_s`,
-- `aux/<service>/queue_depth`, `aux/<service>/latency_s` (driver/metrics/names.py). The
-- labels are catalog/labels.py's telemetry label set: `attempt` counts the run's attempts
-- (a restart or a resume re-runs steps from its checkpoint under the next attempt, so a
-- step can have a row per attempt: queries take each step's newest attempt), `worker` and
-- `service` name an aux-service worker and its service (`train` for training ranks).
CREATE TABLE IF NOT EXISTS platform.run_metrics
(
    ts        DateTime64(3, 'UTC') CODEC(Delta, ZSTD),
    cluster   LowCardinality(String),
    team      LowCardinality(String),
    run       LowCardinality(String),
    learner   LowCardinality(String) DEFAULT '',
    attempt   UInt32 DEFAULT 0,
    rank      UInt32,
    pod       String,
    node      LowCardinality(String),
    worker    LowCardinality(String) DEFAULT '',
    service   LowCardinality(String) DEFAULT '',
    step      UInt64,
    name      LowCardinality(String),
    value     Float64 CODEC(Gorilla, ZSTD)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (team, run, name, step, rank)
TTL toDateTime(ts) + INTERVAL 400 DAY;

-- Migration (columns added since the first release).
ALTER TABLE platform.run_metrics
    ADD COLUMN IF NOT EXISTS attempt UInt32 DEFAULT 0 AFTER learner,
    ADD COLUMN IF NOT EXISTS worker LowCardinality(String) DEFAULT '' AFTER node,
    ADD COLUMN IF NOT EXISTS service LowCardinality(String) DEFAULT '' AFTER worker;

-- What happened to a node: Warden's decisions, GPU XIDs, checks, reboots, repairs.
CREATE TABLE IF NOT EXISTS platform.node_events
(
    ts        DateTime64(3, 'UTC'),
    cluster   LowCardinality(String),
    node      LowCardinality(String),
    pool      LowCardinality(String) DEFAULT '',
    source    LowCardinality(String),
    kind      LowCardinality(String),
    severity  Enum8('info' = 1, 'warning' = 2, 'error' = 3, 'critical' = 4),
    reason    String,
    message   String DEFAULT '',
    workflow  String DEFAULT '',
    run       LowCardinality(String) DEFAULT '',
    team      LowCardinality(String) DEFAULT ''
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, node, ts)
TTL toDateTime(ts) + INTERVAL 730 DAY;

-- Warden's action records (warden/telemetry.py TABLE_DDL, the same columns and engine; Warden
-- also creates it when it starts, in the database of WARDEN_CLICKHOUSE_URL). `id` is stable
-- per remediation and action, so a retried activity collapses into one row.
CREATE TABLE IF NOT EXISTS platform.warden_actions
(
    id String,
    time DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    node String,
    action LowCardinality(String),
    reason String,
    remediation_id String,
    detail String
)
ENGINE = ReplacingMergeTree(time)
ORDER BY (cluster, node, id);

-- Every Warden action is also a node event (what the node-health dashboard shows).
CREATE MATERIALIZED VIEW IF NOT EXISTS platform.node_events_from_warden
TO platform.node_events
AS SELECT
    time AS ts,
    cluster,
    node,
    'warden' AS source,
    action AS kind,
    multiIf(action = 'escalate', 'error',
            action IN ('cordon', 'drain', 'reboot', 'diag'), 'warning', 'info') AS severity,
    reason,
    detail AS message,
    remediation_id AS workflow
FROM platform.warden_actions;

-- NCCL Inspector lines as Fluent Bit ships them, kept a week. The Inspector plugin
-- (NVIDIA/nccl plugins/profiler/inspector, output format v4.0) writes one compact JSON
-- object per line to <NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log: `header` (the
-- communicator: id, comm_name, rank, n_ranks, nnodes), `metadata` (dump_timestamp_us,
-- hostname, pid, ...) and either `coll_perf` (a collective) or `p2p_perf` (a send/recv,
-- not kept). The materialized view below parses collectives into nccl_collectives;
-- observability/inspector.py is the same mapping in Python (a test holds them equal).
CREATE TABLE IF NOT EXISTS platform.nccl_inspector_raw
(
    date        Float64,
    node        LowCardinality(String),
    file        String,
    log         String,
    kubernetes  String DEFAULT '{}'
)
ENGINE = MergeTree
ORDER BY (node, date)
TTL toDateTime(toUInt32(date)) + INTERVAL 7 DAY;

-- One collective of one rank: `rank` and `n_ranks` are the rank's place in the communicator
-- `comm_id`; a process is (node, pod, pid), its global rank its rank in its largest
-- communicator. `seq` is NCCL's per-communicator count of that collective, the same on every
-- rank, so (comm_id, collective, msg_size_bytes, seq) names one instance across ranks.
-- `exec_time_us` is wait plus transfer (the kernel starts when the rank arrives and ends
-- when the last rank's data is through): observability/sql/ reads arrival skew from it.
-- `ts` is when the Inspector wrote the record (within one dump interval of its end).
CREATE TABLE IF NOT EXISTS platform.nccl_collectives
(
    ts               DateTime64(6, 'UTC'),
    cluster          LowCardinality(String),
    team             LowCardinality(String),
    run              LowCardinality(String),
    namespace        LowCardinality(String),
    pod              String,
    node             LowCardinality(String),
    comm_id          String,
    comm_name        String DEFAULT '',
    pid              UInt32 DEFAULT 0,
    rank             UInt32,
    n_ranks          UInt32,
    n_nodes          UInt32,
    collective       LowCardinality(String),
    seq              UInt64,
    msg_size_bytes   UInt64,
    exec_time_us     Float64,
    timing_source    LowCardinality(String),
    algbw_gbs        Float64,
    busbw_gbs        Float64,
    -- the straggler analysis' keys, computed once on insert (observability/sql/)
    instance         UInt64 MATERIALIZED cityHash64(comm_id, collective, msg_size_bytes, seq),
    process          UInt64 MATERIALIZED cityHash64(node, pod, pid)
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (team, run, comm_id, collective, seq, rank)
TTL toDateTime(ts) + INTERVAL 90 DAY;

-- Migration (columns added since the first release).
ALTER TABLE platform.nccl_collectives
    ADD COLUMN IF NOT EXISTS comm_name String DEFAULT '' AFTER comm_id,
    ADD COLUMN IF NOT EXISTS pid UInt32 DEFAULT 0 AFTER comm_name,
    ADD COLUMN IF NOT EXISTS instance UInt64
        MATERIALIZED cityHash64(comm_id, collective, msg_size_bytes, seq) AFTER busbw_gbs,
    ADD COLUMN IF NOT EXISTS process UInt64 MATERIALIZED cityHash64(node, pod, pid) AFTER instance;

CREATE MATERIALIZED VIEW IF NOT EXISTS platform.nccl_collectives_mv
TO platform.nccl_collectives
AS SELECT
    fromUnixTimestamp64Micro(JSONExtractInt(log, 'metadata', 'dump_timestamp_us'), 'UTC') AS ts,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/cluster') AS cluster,
    if(JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team') != '',
       JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team'),
       JSONExtractString(kubernetes, 'namespace_name')) AS team,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/run') AS run,
    JSONExtractString(kubernetes, 'namespace_name') AS namespace,
    JSONExtractString(kubernetes, 'pod_name') AS pod,
    if(node != '', node, JSONExtractString(log, 'metadata', 'hostname')) AS node,
    JSONExtractString(log, 'header', 'id') AS comm_id,
    JSONExtractString(log, 'header', 'comm_name') AS comm_name,
    JSONExtractUInt(log, 'metadata', 'pid') AS pid,
    JSONExtractUInt(log, 'header', 'rank') AS rank,
    JSONExtractUInt(log, 'header', 'n_ranks') AS n_ranks,
    JSONExtractUInt(log, 'header', 'nnodes') AS n_nodes,
    JSONExtractString(log, 'coll_perf', 'coll') AS collective,
    JSONExtractUInt(log, 'coll_perf', 'coll_sn') AS seq,
    JSONExtractUInt(log, 'coll_perf', 'coll_msg_size_bytes') AS msg_size_bytes,
    JSONExtractFloat(log, 'coll_perf', 'coll_exec_time_us') AS exec_time_us,
    JSONExtractString(log, 'coll_perf', 'coll_timing_source') AS timing_source,
    JSONExtractFloat(log, 'coll_perf', 'coll_algobw_gbs') AS algbw_gbs,
    JSONExtractFloat(log, 'coll_perf', 'coll_busbw_gbs') AS busbw_gbs
FROM platform.nccl_inspector_raw
WHERE JSONHas(log, 'coll_perf');

-- Migration: the view's query as created above (a test holds the two equal).
ALTER TABLE platform.nccl_collectives_mv MODIFY QUERY
SELECT
    fromUnixTimestamp64Micro(JSONExtractInt(log, 'metadata', 'dump_timestamp_us'), 'UTC') AS ts,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/cluster') AS cluster,
    if(JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team') != '',
       JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team'),
       JSONExtractString(kubernetes, 'namespace_name')) AS team,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/run') AS run,
    JSONExtractString(kubernetes, 'namespace_name') AS namespace,
    JSONExtractString(kubernetes, 'pod_name') AS pod,
    if(node != '', node, JSONExtractString(log, 'metadata', 'hostname')) AS node,
    JSONExtractString(log, 'header', 'id') AS comm_id,
    JSONExtractString(log, 'header', 'comm_name') AS comm_name,
    JSONExtractUInt(log, 'metadata', 'pid') AS pid,
    JSONExtractUInt(log, 'header', 'rank') AS rank,
    JSONExtractUInt(log, 'header', 'n_ranks') AS n_ranks,
    JSONExtractUInt(log, 'header', 'nnodes') AS n_nodes,
    JSONExtractString(log, 'coll_perf', 'coll') AS collective,
    JSONExtractUInt(log, 'coll_perf', 'coll_sn') AS seq,
    JSONExtractUInt(log, 'coll_perf', 'coll_msg_size_bytes') AS msg_size_bytes,
    JSONExtractFloat(log, 'coll_perf', 'coll_exec_time_us') AS exec_time_us,
    JSONExtractString(log, 'coll_perf', 'coll_timing_source') AS timing_source,
    JSONExtractFloat(log, 'coll_perf', 'coll_algobw_gbs') AS algbw_gbs,
    JSONExtractFloat(log, 'coll_perf', 'coll_busbw_gbs') AS busbw_gbs
FROM platform.nccl_inspector_raw
WHERE JSONHas(log, 'coll_perf');

-- One log line of a run's process: the driver, a training rank, an aux-service worker, the
-- DiLoCo synchronizer; with catalog/labels.py's label set (`rank` -1 where there is none:
-- the driver, a service, a pod's container output). `source` says how it came: `logging`
-- (the process's own log records: a local run's log files, observability/logs.py, or
-- OpenTelemetry logs through the collector, the view below) or `stdout`/`stderr` (a run
-- pod's container output, Fluent Bit, the second view below). `logger` is the Python
-- logger (or the container), `level` the record's level. Ordered for the questions a
-- post-mortem asks: a run's lines, one rank's lines around a time.
CREATE TABLE IF NOT EXISTS platform.run_logs
(
    ts        DateTime64(6, 'UTC') CODEC(Delta, ZSTD),
    cluster   LowCardinality(String),
    team      LowCardinality(String),
    run       LowCardinality(String),
    learner   LowCardinality(String) DEFAULT '',
    attempt   UInt32 DEFAULT 0,
    rank      Int32 DEFAULT -1,
    pod       String,
    node      LowCardinality(String),
    worker    LowCardinality(String) DEFAULT '',
    service   LowCardinality(String) DEFAULT '',
    source    LowCardinality(String) DEFAULT 'logging',
    logger    LowCardinality(String) DEFAULT '',
    level     LowCardinality(String) DEFAULT '',
    line      String CODEC(ZSTD)
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (team, run, rank, ts)
TTL toDateTime(ts) + INTERVAL 90 DAY;

-- OpenTelemetry log records of run processes, as the collector's ClickHouse exporter
-- (opentelemetry-collector-contrib clickhouseexporter, the image's release) inserts them
-- (its logs table's columns; `create_schema: false` in kustomize/bases/observability/
-- otel-collector/config.yaml). A Null table keeps nothing: the view maps each record into
-- run_logs, its resource attributes (catalog.labels.OTEL_ATTRIBUTES) into the label set.
CREATE TABLE IF NOT EXISTS platform.otel_run_logs
(
    Timestamp          DateTime64(9),
    TraceId            String,
    SpanId             String,
    TraceFlags         UInt8,
    SeverityText       LowCardinality(String),
    SeverityNumber     UInt8,
    ServiceName        LowCardinality(String),
    Body               String,
    ResourceSchemaUrl  LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String),
    ScopeSchemaUrl     LowCardinality(String),
    ScopeName          String,
    ScopeVersion       LowCardinality(String),
    ScopeAttributes    Map(LowCardinality(String), String),
    LogAttributes      Map(LowCardinality(String), String)
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS platform.run_logs_from_otel
TO platform.run_logs
AS SELECT
    Timestamp AS ts,
    ResourceAttributes['k8s.cluster.name'] AS cluster,
    ResourceAttributes['k8s.namespace.name'] AS team,
    ResourceAttributes['reve.run'] AS run,
    ResourceAttributes['reve.learner'] AS learner,
    toUInt32OrZero(ResourceAttributes['reve.attempt']) AS attempt,
    toInt32OrDefault(ResourceAttributes['reve.rank'], toInt32(-1)) AS rank,
    ResourceAttributes['k8s.pod.name'] AS pod,
    ResourceAttributes['k8s.node.name'] AS node,
    ResourceAttributes['service.instance.id'] AS worker,
    ServiceName AS service,
    'logging' AS source,
    ScopeName AS logger,
    multiIf(SeverityText = 'WARN', 'WARNING', SeverityText = 'FATAL', 'CRITICAL',
            SeverityText) AS level,
    Body AS line
FROM platform.otel_run_logs
WHERE ResourceAttributes['reve.run'] != '';

-- Run pods' container output as Fluent Bit ships it (kustomize/bases/observability/
-- fluent-bit: the CRI log files of pods labelled with a run, the kubernetes filter's pod
-- metadata), kept a week; the view maps each line into run_logs. A line a training rank
-- wrote carries `rank=<n>` (driver/output/logs.py's format), which becomes its rank.
CREATE TABLE IF NOT EXISTS platform.container_logs_raw
(
    date        Float64,
    node        LowCardinality(String),
    stream      LowCardinality(String) DEFAULT '',
    log         String,
    kubernetes  String DEFAULT '{}'
)
ENGINE = MergeTree
ORDER BY (node, date)
TTL toDateTime(toUInt32(date)) + INTERVAL 7 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS platform.run_logs_from_containers
TO platform.run_logs
AS SELECT
    fromUnixTimestamp64Micro(toInt64(date * 1000000), 'UTC') AS ts,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/cluster') AS cluster,
    if(JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team') != '',
       JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/team'),
       JSONExtractString(kubernetes, 'namespace_name')) AS team,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/run') AS run,
    JSONExtractString(kubernetes, 'labels', 'platform.reve.dev/learner') AS learner,
    toUInt32OrZero(extract(log, '\\battempt=(\\d+)')) AS attempt,
    toInt32OrDefault(extract(log, '\\brank=(\\d+)'), toInt32(-1)) AS rank,
    JSONExtractString(kubernetes, 'pod_name') AS pod,
    if(node != '', node, JSONExtractString(kubernetes, 'host')) AS node,
    '' AS worker,
    if(learner = 'synchronizer', 'synchronizer', '') AS service,
    if(stream = 'stderr', 'stderr', 'stdout') AS source,
    JSONExtractString(kubernetes, 'container_name') AS logger,
    extract(log, '\\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\\b') AS level,
    log AS line
FROM platform.container_logs_raw
WHERE run != '';
