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
-- it reported in the window (the world group). The means are taken as sums over the count
-- (three sums of the record columns instead of three means of per-record differences).
WITH
--@include instances.sql
,
per_unit AS
(
    SELECT window,
           (any(node), any(pod), any(pid), argMax(comm_rank, n_ranks), count() AS n,
            countIf(exec_time_us = transfer_us), (sum(exec_time_us) - sum(transfer_us)) / n,
            sum(transfer_us) / n) AS unit,
           (sum(median_us) - sum(exec_time_us)) / n AS delay_us
    FROM samples
    GROUP BY window, process
),
--@include outliers.sql
SELECT window, unit.4 AS rank, unit.1 AS node, unit.2 AS pod, unit.3 AS pid,
       unit.5 AS samples, unit.6 AS last_count, unit.6 / unit.5 AS last_fraction,
       delay_us, unit.7 AS wait_us, unit.8 AS transfer_us, straggler
FROM judged
ORDER BY window, rank, node, pod, pid
