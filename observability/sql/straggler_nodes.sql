-- Arrival skew per node per window: one row per (window, node). A node arrives when its
-- last rank arrives, so per instance the node's duration is the shortest of its ranks'.
--   samples, last_count, last_fraction, delay_us, straggler: as for ranks
--   ranks          ranks of the node seen in the window
WITH
--@include instances.sql
,
node_instances AS
(
    SELECT window, node, comm_id, collective, msg_size_bytes, seq,
           min(exec_time_us) AS node_us, any(transfer_us) AS instance_transfer_us,
           any(median_us) AS instance_median_us
    FROM samples
    GROUP BY window, node, comm_id, collective, msg_size_bytes, seq
),
node_ranks AS
(
    SELECT window, node, uniqExact(pod, pid) AS ranks
    FROM samples
    GROUP BY window, node
),
per_unit AS
(
    SELECT window, node,
           count() AS samples,
           countIf(node_us = instance_transfer_us) AS last_count,
           avg(instance_median_us - node_us) AS delay_us
    FROM node_instances
    GROUP BY window, node
),
--@include outliers.sql
SELECT j.window AS window, j.node AS node, r.ranks AS ranks, j.samples AS samples,
       j.last_count AS last_count, j.last_count / j.samples AS last_fraction,
       j.delay_us AS delay_us, j.straggler AS straggler
FROM judged AS j
INNER JOIN node_ranks AS r USING (window, node)
ORDER BY window, node
