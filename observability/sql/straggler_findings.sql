-- Persistent stragglers: ranks that were stragglers in at least {min_fraction} of the
-- windows they were seen in, over at least {min_duration_s} seconds (first straggler window
-- to the end of the last). These are the findings handed to Warden for the rank's node.
SELECT rank, node, pod, pid,
       count() AS windows,
       countIf(straggler) AS straggler_windows,
       countIf(straggler) / count() AS fraction,
       minIf(window, straggler) AS since,
       maxIf(window, straggler) + toIntervalSecond({window_s:UInt32}) AS until,
       avgIf(delay_us, straggler) AS delay_us,
       avgIf(last_fraction, straggler) AS last_fraction,
       sum(samples) AS samples,
       countIf(straggler) / count() >= {min_fraction:Float64}
         AND dateDiff('second', minIf(window, straggler),
                      maxIf(window, straggler) + toIntervalSecond({window_s:UInt32}))
             >= {min_duration_s:UInt32} AS persistent
FROM
(
--@include straggler_ranks.sql
)
GROUP BY rank, node, pod, pid
HAVING straggler_windows > 0
ORDER BY persistent DESC, straggler_windows DESC, delay_us DESC, rank
