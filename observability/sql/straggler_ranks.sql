-- Arrival skew per rank per window: one row per (window, rank).
--   samples        collective instances of the rank in the window (the confidence's count)
--   last_count     instances in which the rank arrived last (its duration was the shortest)
--   last_fraction  last_count / samples (the confidence that the rank holds others back)
--   delay_us       mean of (instance median duration - own duration): how much later than
--                  the median rank this rank arrived; ~0 for a healthy rank
--   wait_us        mean of (own duration - shortest duration): time spent waiting for others
--   transfer_us    mean shortest duration: the transfer time estimate
--   straggler      the outlier rule of outliers.sql
-- A rank is a process (node, pod, pid); its number is its rank in the largest communicator
-- it belongs to (the world group).
WITH
--@include instances.sql
,
processes AS
(
    SELECT node, pod, pid, argMax(rank, n_ranks) AS rank
    FROM base
    GROUP BY node, pod, pid
),
per_unit AS
(
    SELECT window, node, pod, pid,
           count() AS samples,
           countIf(exec_time_us = transfer_us) AS last_count,
           avg(median_us - exec_time_us) AS delay_us,
           avg(exec_time_us - transfer_us) AS wait_us,
           avg(transfer_us) AS mean_transfer_us
    FROM samples
    GROUP BY window, node, pod, pid
),
--@include outliers.sql
SELECT j.window AS window, p.rank AS rank, j.node AS node, j.pod AS pod, j.pid AS pid,
       j.samples AS samples, j.last_count AS last_count,
       j.last_count / j.samples AS last_fraction,
       j.delay_us AS delay_us, j.wait_us AS wait_us, j.mean_transfer_us AS transfer_us,
       j.straggler AS straggler
FROM judged AS j
INNER JOIN processes AS p USING (node, pod, pid)
ORDER BY window, rank, node, pod, pid
