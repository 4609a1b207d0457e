-- Shared CTE: which units (ranks or nodes) of `per_unit` are stragglers in their window.
-- A unit is a straggler when its mean arrival delay is at least {min_delay_us} and lies more
-- than {mad_k} robust standard deviations (1.4826 x the median absolute deviation) above
-- the window's median delay: a minority of late units never moves the median.
judged AS
(
    SELECT *,
           delay_us >= greatest({min_delay_us:Float64},
                                centre_us + {mad_k:Float64} * 1.4826 * mad_us) AS straggler
    FROM
    (
        SELECT *,
               quantileExact(0.5)(abs(delay_us - centre_us))
                   OVER (PARTITION BY window) AS mad_us
        FROM
        (
            SELECT *, quantileExact(0.5)(delay_us) OVER (PARTITION BY window) AS centre_us
            FROM per_unit
        )
    )
)
