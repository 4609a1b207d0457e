"""The straggler analysis of observability/sql/ in pandas: the benchmark's peer and the
cross-check of the SQL (the same rows on the same records, tests/observability).

    ranks = straggler_ranks(df)      # df: the columns of platform.nccl_collectives, with
    nodes = straggler_nodes(df)      # `ts_us` (epoch microseconds) for `ts`, one run,
    found = straggler_findings(ranks)  # already filtered to the time range

Medians are the upper median (`interpolation="higher"`), as ClickHouse's `quantileExact`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from observability.stragglers import DEFAULT, Thresholds

KEY = ["comm_id", "collective", "msg_size_bytes", "seq"]
PROCESS = ["node", "pod", "pid"]


def upper_median(grouped) -> pd.Series:
    return grouped.quantile(0.5, interpolation="higher")


def samples(df: pd.DataFrame, t: Thresholds = DEFAULT) -> pd.DataFrame:
    """Complete instances' records with their window, transfer time and median duration."""
    g = df.groupby(KEY, sort=False, observed=True)
    gid = g.ngroup().to_numpy()
    duration = g["exec_time_us"]
    count = g.size().to_numpy()
    complete = (count == g["n_ranks"].first().to_numpy()) & (count > 1)
    step = t.window_s * 1_000_000
    window = g["ts_us"].min().to_numpy() // step * step
    keep = complete[gid]
    out = df.loc[keep, [*PROCESS, *KEY, "rank", "n_ranks", "exec_time_us"]].copy()
    out["window"] = window[gid[keep]]
    out["transfer_us"] = duration.min().to_numpy()[gid[keep]]
    out["median_us"] = upper_median(duration).to_numpy()[gid[keep]]
    return out


def judge(per_unit: pd.DataFrame, t: Thresholds) -> pd.DataFrame:
    """The outlier rule of outliers.sql: a `straggler` column."""
    by_window = per_unit.groupby("window")["delay_us"]
    centre = upper_median(by_window).rename("centre_us")
    deviation = (per_unit["delay_us"] - per_unit["window"].map(centre)).abs()
    mad = upper_median(deviation.groupby(per_unit["window"])).rename("mad_us")
    bar = np.maximum(t.min_delay_us, centre + t.mad_k * 1.4826 * mad)
    per_unit["straggler"] = per_unit["delay_us"] >= per_unit["window"].map(bar)
    return per_unit


def straggler_ranks(df: pd.DataFrame, t: Thresholds = DEFAULT) -> pd.DataFrame:
    s = samples(df, t)
    s["is_last"] = s["exec_time_us"] == s["transfer_us"]
    s["delay_us"] = s["median_us"] - s["exec_time_us"]
    s["wait_us"] = s["exec_time_us"] - s["transfer_us"]
    per = s.groupby(["window", *PROCESS], observed=True).agg(
        samples=("is_last", "size"),
        last_count=("is_last", "sum"),
        delay_us=("delay_us", "mean"),
        wait_us=("wait_us", "mean"),
        transfer_us=("transfer_us", "mean"),
    )
    per = judge(per.reset_index(), t)
    largest = s.groupby(["window", *PROCESS], observed=True)["n_ranks"].idxmax().to_numpy()
    per["rank"] = s.loc[largest, "rank"].to_numpy()  # the same group order as `per`
    per["last_fraction"] = per["last_count"] / per["samples"]
    columns = ["window", "rank", *PROCESS, "samples", "last_count", "last_fraction",
               "delay_us", "wait_us", "transfer_us", "straggler"]  # fmt: skip
    return per[columns].sort_values(["window", "rank", *PROCESS], ignore_index=True)


def straggler_nodes(df: pd.DataFrame, t: Thresholds = DEFAULT) -> pd.DataFrame:
    s = samples(df, t)
    inst = s.groupby(["window", "node", *KEY], observed=True).agg(
        node_us=("exec_time_us", "min"),
        transfer_us=("transfer_us", "first"),
        median_us=("median_us", "first"),
        node_ranks=("exec_time_us", "size"),
    )
    inst["is_last"] = inst["node_us"] == inst["transfer_us"]
    inst["delay_us"] = inst["median_us"] - inst["node_us"]
    per = inst.groupby(["window", "node"], observed=True).agg(
        ranks=("node_ranks", "max"),
        samples=("is_last", "size"),
        last_count=("is_last", "sum"),
        delay_us=("delay_us", "mean"),
    )
    per = judge(per.reset_index(), t)
    per["last_fraction"] = per["last_count"] / per["samples"]
    columns = ["window", "node", "ranks", "samples", "last_count", "last_fraction", "delay_us",
               "straggler"]  # fmt: skip
    return per[columns].sort_values(["window", "node"], ignore_index=True)


def straggler_findings(ranks: pd.DataFrame, t: Thresholds = DEFAULT) -> pd.DataFrame:
    step = t.window_s * 1_000_000
    hit = ranks[ranks["straggler"]]
    g = ranks.groupby(["rank", *PROCESS], observed=True)
    h = hit.groupby(["rank", *PROCESS], observed=True)
    out = pd.DataFrame({"windows": g.size()}).join(
        h.agg(
            straggler_windows=("straggler", "size"),
            since=("window", "min"),
            until=("window", "max"),
            delay_us=("delay_us", "mean"),
            last_fraction=("last_fraction", "mean"),
        ),
        how="inner",
    )
    out["samples"] = g["samples"].sum()
    out["until"] += step
    out["fraction"] = out["straggler_windows"] / out["windows"]
    span_s = (out["until"] - out["since"]) // 1_000_000
    out["persistent"] = (out["fraction"] >= t.min_fraction) & (span_s >= t.min_duration_s)
    out = out.reset_index()
    order = ["persistent", "straggler_windows", "delay_us", "rank"]
    return out.sort_values(order, ascending=[False, False, False, True], ignore_index=True)
