-- Shared CTE: which units (ranks or nodes) of `per_unit` (window, unit, delay_us; `unit` a
-- tuple of the unit's other columns) are stragglers in their window. A unit is a straggler
-- when its mean arrival delay is at least {min_delay_us} and lies more than {mad_k} robust
-- standard deviations (1.4826 x the median absolute deviation) above the window's median
-- delay: a minority of late units never moves the median. Medians are upper medians, as
-- quantileExact(0.5), computed on each window's sorted array (a window-function quantile
-- would be recomputed for every row).
judged AS
(
    SELECT window, unit, delay_us,
           delay_us >= greatest({min_delay_us:Float64},
                                centre_us + {mad_k:Float64} * 1.4826 * mad_us) AS straggler
    FROM
    (
        SELECT window,
               groupArray(unit) AS units,
               groupArray(delay_us) AS delays,
               arraySort(delays)[intDiv(length(delays), 2) + 1] AS centre_us,
               arraySort(arrayMap(d -> abs(d - centre_us), delays))
                   [intDiv(length(delays), 2) + 1] AS mad_us
        FROM per_unit
        GROUP BY window
    )
    ARRAY JOIN units AS unit, delays AS delay_us
)
