-- Shared CTEs: which units (ranks or nodes) of `per_unit` are stragglers in a window.
-- A unit is a straggler when its mean arrival delay is at least {min_delay_us} and lies more
-- than {mad_k} robust standard deviations (1.4826 x the median absolute deviation) above
-- the window's median delay: a minority of late units never moves the median.
centre AS
(
    SELECT window, quantileExact(0.5)(delay_us) AS centre_us
    FROM per_unit
    GROUP BY window
),
spread AS
(
    SELECT window, any(c.centre_us) AS centre_us,
           quantileExact(0.5)(abs(u.delay_us - c.centre_us)) AS mad_us
    FROM per_unit AS u
    INNER JOIN centre AS c USING (window)
    GROUP BY window
),
judged AS
(
    SELECT u.*,
           u.delay_us >= greatest({min_delay_us:Float64},
                                  s.centre_us + {mad_k:Float64} * 1.4826 * s.mad_us) AS straggler
    FROM per_unit AS u
    INNER JOIN spread AS s USING (window)
)
