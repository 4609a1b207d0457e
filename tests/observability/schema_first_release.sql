-- The platform schema as first released (kept to test the migrations of schema.sql).
-- The platform's telemetry schema: run metrics, node events and NCCL collective records.
-- Run by the ClickHouse server at first start (/docker-entrypoint-initdb.d) and by
-- tests/kustomize/test_clickhouse_schema.py in chDB. Every statement is idempotent.
-- The run identity (cluster, team, run, learner) is the same on every row as on every
-- manifest label (catalog/labels.py) and checkpoint path.

CREATE DATABASE IF NOT EXISTS platform;

-- One scalar per (run, rank, step, name): step time, loss, throughput, aux-service queue
-- depths. Names: `train/step_time_s`, `train/loss`, `train/tokens_per_s`,
-- `aux/<service>/queue_depth`, `aux/<service>/latency_s`.
CREATE TABLE IF NOT EXISTS platform.run_metrics
(
    ts        DateTime64(3, 'UTC') CODEC(Delta, ZSTD),
    cluster   LowCardinality(String),
    team      LowCardinality(String),
    run       LowCardinality(String),
    learner   LowCardinality(String) DEFAULT '',
    rank      UInt32,
    pod       String,
    node      LowCardinality(String),
    step      UInt64,
    name      LowCardinality(String),
    value     Float64 CODEC(Gorilla, ZSTD)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (team, run, name, step, rank)
TTL toDateTime(ts) + INTERVAL 400 DAY;

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

-- NCCL Inspector lines as Fluent Bit ships them (one JSON line per collective per rank),
-- kept a week. The materialized view below parses them into nccl_collectives.
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
    rank             UInt32,
    n_ranks          UInt32,
    n_nodes          UInt32,
    collective       LowCardinality(String),
    seq              UInt64,
    msg_size_bytes   UInt64,
    exec_time_us     Float64,
    timing_source    LowCardinality(String),
    algbw_gbs        Float64,
    busbw_gbs        Float64
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (team, run, comm_id, collective, seq, rank)
TTL toDateTime(ts) + INTERVAL 90 DAY;

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
