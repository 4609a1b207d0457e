-- Arrival skew per node per window: one row per (window, node). A node arrives when its
-- last rank arrives, so per instance the node's duration is the shortest of its ranks'.
--   samples, last_count, last_fraction, delay_us, straggler: as for ranks
--   ranks          most ranks of the node in one communicator in the window
WITH
--@include instances.sql
,
node_instances AS
(
    SELECT window, node, min(exec_time_us) AS node_us, any(transfer_us) AS instance_transfer_us,
           any(median_us) AS instance_median_us, count() AS node_ranks
    FROM samples
    GROUP BY window, node, instance
),
per_unit AS
(
    SELECT window, node,
           (node, max(node_ranks), count(), countIf(node_us = instance_transfer_us)) AS unit,
           avg(instance_median_us - node_us) AS delay_us
    FROM node_instances
    GROUP BY window, node
),
--@include outliers.sql
SELECT window, unit.1 AS node, unit.2 AS ranks, unit.3 AS samples, unit.4 AS last_count,
       unit.4 / unit.3 AS last_fraction, delay_us, straggler
FROM judged
ORDER BY window, node
