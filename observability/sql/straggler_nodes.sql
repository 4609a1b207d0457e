-- Arrival skew per node per window: one row per (window, node). A node arrives when its
-- last rank arrives, so per instance the node's duration is the shortest of its ranks'.
--   samples, last_count, last_fraction, delay_us, straggler: as for ranks
--   ranks          most ranks of the node in one communicator in the window
-- node_instances groups the records by (instance, node) straight from `base` under one
-- 64-bit key (instance XOR the node's hash: cityHash64 of a LowCardinality column hashes its
-- dictionary, not every row), then joins the instances' ~1/8 as many rows, not every record.
WITH
--@include instances.sql
,
node_instances AS
(
    SELECT bitXor(instance, cityHash64(node)) AS node_instance, any(instance) AS key,
           any(node) AS node_name, min(exec_time_us) AS node_us, count() AS node_ranks
    FROM base
    GROUP BY node_instance
),
per_unit AS
(
    SELECT i.window AS window, n.node_name AS node,
           (node, max(node_ranks), count(), countIf(node_us = transfer_us)) AS unit,
           avg(median_us - node_us) AS delay_us
    FROM node_instances AS n
    INNER JOIN instances AS i ON n.key = i.instance
    GROUP BY window, node
),
--@include outliers.sql
SELECT window, unit.1 AS node, unit.2 AS ranks, unit.3 AS samples, unit.4 AS last_count,
       unit.4 / unit.3 AS last_fraction, delay_us, straggler
FROM judged
ORDER BY window, node
