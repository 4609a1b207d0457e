-- Shared CTEs of the straggler analysis (included by the other files, never run alone).
-- base: one run's collective records in the time range.
-- instances: one row per collective instance (communicator, collective, message size,
--   sequence number: the table's `instance` key; `process` is node, pod, pid), kept only
--   when every rank of the communicator reported it. Each rank's duration is wait +
--   transfer; the rank with the shortest duration arrived last (it did not wait), so the
--   shortest duration estimates the transfer time. The window of an instance is the start
--   of the ~30 s interval holding its first record.
-- samples: each record with its instance's window, transfer time and median duration.
-- ClickHouse inlines a CTE at every reference, so each heavy one is referenced once.
base AS
(
    SELECT ts, node, pod, pid, rank, n_ranks, exec_time_us, instance, process
    FROM platform.nccl_collectives
    WHERE team = {team:String} AND run = {run:String}
      AND ts >= {start:DateTime64(6)} AND ts < {end:DateTime64(6)}
),
instances AS
(
    SELECT instance,
           toStartOfInterval(min(ts), toIntervalSecond({window_s:UInt32})) AS window,
           min(exec_time_us) AS transfer_us,
           quantileExact(0.5)(exec_time_us) AS median_us
    FROM base
    GROUP BY instance
    HAVING count() = any(n_ranks) AND count() > 1
),
samples AS
(
    SELECT i.window AS window, b.instance AS instance, b.process AS process, b.node AS node,
           b.pod AS pod, b.pid AS pid, b.rank AS comm_rank, b.n_ranks AS n_ranks,
           b.exec_time_us AS exec_time_us, i.transfer_us AS transfer_us,
           i.median_us AS median_us
    FROM base AS b
    INNER JOIN instances AS i USING (instance)
)
