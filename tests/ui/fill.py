"""A run output folder for the dashboard's tests: metrics.jsonl, summary.json and a chDB store
with every rank's rows, aux-service rows and NCCL collective records in which one rank
straggles (observability.synthetic).

    python -m tests.ui.fill outputs-demo   # then: runner ui --outputs outputs-demo
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from observability import store, synthetic

TEAM, RUN = "research", "straggly"
RANKS, PER_NODE, SLOW_RANK, STEPS = 16, 4, 5, 60
SCENARIO = synthetic.Scenario(ranks=RANKS, ranks_per_node=PER_NODE, seconds=95,
                              slow=(synthetic.Slow(ranks=(SLOW_RANK,), factor=1.3),))  # fmt: skip


def metric_rows(t0_s: float) -> list[dict]:
    rows = []
    for step in range(1, STEPS + 1):
        for rank in range(RANKS):
            where = {"pod": f"w-{rank // PER_NODE}", "node": f"node-{rank // PER_NODE}"}
            identity = {"cluster": "local", "team": TEAM, "run": RUN, **where}
            slow = 1.3 if rank == SLOW_RANK else 1.0
            values = {
                "train/step_time_s": 0.1 * slow + rank * 1e-4,
                "train/loss": 4.0 / (1 + 0.05 * step),
                "train/tokens_per_s": 2000.0,
            }
            rows += store.metric_rows(identity, rank, step, t0_s + step * 1.5, values)
        aux = {"aux/encoder/queue_depth": float(step % 4), "aux/encoder/workers": 2.0,
               "aux/encoder/healthy_workers": 2.0, "aux/encoder/errors": 0.0,
               "aux/encoder/latency_s": 0.012}  # fmt: skip
        rows += store.metric_rows({"team": TEAM, "run": RUN}, 0, step, t0_s + step * 1.5, aux)
    return rows


def collective_rows(seed: int = 3) -> list[dict]:
    cols = synthetic.generate(SCENARIO, seed)
    names = synthetic.names(SCENARIO)
    rows = []
    for i in range(len(cols["ts_us"])):
        ts = int(cols["ts_us"][i])
        rows.append({
            "ts": f"{store.ts_text(ts // 1_000_000)[:19]}.{ts % 1_000_000:06d}",
            "cluster": "local", "team": TEAM, "run": RUN, "namespace": TEAM,
            "pod": names["pod"][cols["pod"][i]], "node": names["node"][cols["node"][i]],
            "comm_id": names["comm_id"][0], "pid": int(cols["pid"][i]),
            "rank": int(cols["rank"][i]), "n_ranks": RANKS, "n_nodes": RANKS // PER_NODE,
            "collective": names["collective"][cols["collective"][i]],
            "seq": int(cols["seq"][i]), "msg_size_bytes": int(cols["msg_size_bytes"][i]),
            "exec_time_us": float(cols["exec_time_us"][i]), "timing_source": "kernel_gpu",
            "algbw_gbs": 0.0, "busbw_gbs": 0.0,
        })  # fmt: skip
    return rows


def fill(outputs: Path, reader) -> Path:
    """Write the run under `outputs/<team>/<run>/` (the store through `reader`)."""
    folder = outputs / TEAM / RUN
    folder.mkdir(parents=True, exist_ok=True)
    t0_s = synthetic.recent_start_us() / 1e6
    lines = [{"step": s, "loss": 4.0 / (1 + 0.05 * s), "step_time": 0.1, "tokens_per_s": 2000.0,
              "time": t0_s + s * 1.5} for s in range(1, STEPS + 1)]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (folder / "summary.json").write_text(json.dumps(
        {"steps": STEPS, "first_loss": lines[0]["loss"], "final_loss": lines[-1]["loss"],
         "world_size": RANKS}))  # fmt: skip
    reader.insert(folder, store.RUN_METRICS, metric_rows(t0_s))
    reader.insert(folder, store.NCCL_COLLECTIVES, collective_rows())
    return folder


if __name__ == "__main__":
    from runner.ui.reader import StoreReader

    r = StoreReader()
    print(fill(Path(sys.argv[1] if len(sys.argv) > 1 else "outputs-demo"), r))
    r.close()
