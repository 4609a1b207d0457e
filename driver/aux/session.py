"""The training side of auxiliary services: one `AuxSession` per training rank.

Built from what the coordinator hands every rank (`AuxRuntime.spec`): an `AuxClient` per
service over that service's proxy table, refreshed from the FleetMonitor every
`aux.fleet_interval_s` (a restarted proxy has a new address; a dead one weighs 0). The
service's workers on the rank's own Ray node (the spec's `endpoints` for that node id) are
called directly, without a proxy, and that node's proxy is left out (`routing.split_links`;
how requests are shared between them and the other nodes' proxies: `routing.link_weights`,
with the node's share of the ranks). For the loop it offers:
- `conditioner()`: a transform that gives each micro-batch its conditioning embeddings from
  `aux.condition`'s service (batches become (images, embeddings));
- `after_step(step, model, writer)` on the writer: every `aux.refresh.every_steps` steps,
  broadcast the weights to the refresh service's workers (driver.aux.refresh) and ask
  `aux.evaluate`'s service to score that version;
- `metrics()` on the writer, once per logging interval: the FleetMonitor's newest summary and
  finished evaluations, as `aux/<service>/<name>` fields of the metrics row.
"""

from __future__ import annotations

import threading

from driver.aux.fleet import EVAL_ERRORS, EVAL_LOSS, EVAL_VERSION, metric
from driver.aux.routing import split_links


class AuxSession:
    """Clients, conditioning, refresh and metrics of one training rank. `where`: (this
    rank's Ray node id, its node's share of the ranks), by default asked of Ray (`locate`)."""

    def __init__(self, cfg, spec: dict, rank: int, where: tuple | None = None):
        from driver.aux.client import AuxClient

        self.cfg, self.rank, self.fleet = cfg, rank, spec.get("fleet")
        self.services = spec.get("services", {})
        self.here, self.share = where if where is not None else locate()
        self.clients = {}
        for name, s in self.services.items():
            proxies, workers = self.links(s)
            self.clients[name] = AuxClient(
                name, rank, proxies, workers=workers, node_share=self.share,
                deadline_s=s["deadline_s"], retries=s["retries"],
            )  # fmt: skip
        self.sender = None
        self.evaluations: list[tuple[int, object]] = []
        self.last_scores: dict = {}  # the newest evaluation, for the run's summary
        self.summary_ref = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._refresh_tables, name="aux-tables", daemon=True)
        if self.fleet is not None and self.clients:
            self.thread.start()

    def info(self, service: str) -> dict:
        """The service's readiness reply (e.g. the encoder's {"dim": ...})."""
        return dict(self.services.get(service, {}).get("info", {}))

    def cond_dim(self) -> int:
        """Size of the conditioning embeddings the model takes (0: none)."""
        service = self.cfg.aux.condition
        return int(self.info(service).get("dim", 0)) if service else 0

    def links(self, service: dict, table: dict | None = None) -> tuple[dict[str, int], list]:
        """(proxies, workers called directly) of a service for this rank, from its spec or
        a fresher FleetMonitor `table` ({"proxies", "nodes"})."""
        table = table or service
        nodes = {**service.get("nodes", {}), **table.get("nodes", {})}
        return split_links(table["proxies"], nodes, service.get("endpoints", {}), self.here)

    def stages(self) -> list:
        """The data pipeline's stage run by `data.remote_stage`'s workers."""
        from driver.aux.remote_stage import RemoteStage

        name = self.cfg.data.remote_stage
        spec = self.services[name]
        proxies, workers = self.links(spec)
        return [RemoteStage(proxies, name, deadline_s=spec["deadline_s"], workers=workers,
                            node_share=self.share)]  # fmt: skip

    def _refresh_tables(self) -> None:
        import ray

        while not self.stopped.wait(self.cfg.aux.fleet_interval_s):
            try:
                tables = ray.get(self.fleet.tables_now.remote(), timeout=10)
            except Exception:  # the monitor is busy or gone: keep the last table
                continue
            for name, table in tables.items():
                if table.get("proxies") and name in self.clients:
                    proxies, _ = self.links(self.services[name], table)
                    self.clients[name].set_proxies(proxies)

    def conditioner(self):
        """The batch transform adding `aux.condition`'s embeddings to each micro-batch
        (batch -> (batch, embeddings)), or None when the model is not conditioned."""
        if not self.cfg.aux.condition:
            return None
        import numpy as np
        import torch

        client = self.clients[self.cfg.aux.condition]

        def condition(batch):
            reply = client.call("encode", {"images": batch})
            return batch, torch.from_numpy(np.array(reply["embeddings"]))

        return condition

    def after_step(self, step: int, model, writer: bool = True, gathers: bool | None = None):
        """Every `aux.refresh.every_steps` steps the writer (rank 0; under torchft the
        writer of the step) broadcasts the weights to the refresh service's workers and asks
        `aux.evaluate`'s service to score that version. A sharded model's full weights are
        gathered parameter by parameter by every rank of the writer's model copy
        (`gathers`; default: the writer alone)."""
        refresh = self.cfg.aux.refresh
        if not refresh.every_steps or step % refresh.every_steps:
            return
        if not (writer if gathers is None else gathers):
            return
        state = full_state(model)  # a collective of the model copy's ranks when sharded
        if not writer:
            return
        if self.sender is None:
            self.sender = self._sender(state, refresh)
        if self.sender.push(step, state) and self.cfg.aux.evaluate:
            client = self.clients[self.cfg.aux.evaluate]
            self.evaluations.append((step, client.submit("evaluate", {"version": step})))

    def _sender(self, state: dict, refresh):
        from driver.aux.refresh import layout_of
        from driver.aux.refresh_sender import Sender, ray_alive, ray_join

        workers = self.services[refresh.service]["workers"]
        backend = refresh.backend
        if backend == "auto":  # nccl only between GPUs: a CPU-only service gets gloo
            on_gpu = self.cfg.aux.services[refresh.service].gpus_per_worker > 0
            backend = "nccl" if on_gpu and next(iter(state.values())).is_cuda else "gloo"
        layout = layout_of(state)
        join = ray_join(workers, layout, backend, refresh.timeout_s)
        alive = ray_alive(workers, refresh.timeout_s)
        return Sender(refresh.service, len(workers), join, layout, backend, refresh.timeout_s,
                      alive=alive)  # fmt: skip

    def metrics(self, final: bool = False) -> dict:
        """Rank 0: the newest fleet summary (never waits for it, except for a fresh one at
        the `final` push) and finished scores."""
        import ray

        row: dict = {}
        if final and self.fleet is not None:
            try:
                ray.get(self.fleet.poll.remote(), timeout=10)
                self.summary_ref = self.fleet.summary.remote()
                ray.wait([self.summary_ref], timeout=10)
            except Exception:  # the row goes without the services' figures
                pass
        if self.fleet is not None:
            if self.summary_ref is not None:
                ready, _ = ray.wait([self.summary_ref], timeout=0)
                if ready:
                    try:
                        row.update(ray.get(self.summary_ref))
                    except Exception:
                        pass
                    self.summary_ref = None
            if self.summary_ref is None:
                self.summary_ref = self.fleet.summary.remote()
        row.update(self._scores())
        return row

    def _scores(self) -> dict:
        row, left = {}, []
        for step, future in self.evaluations:
            if not future.done():
                left.append((step, future))
                continue
            try:
                reply = future.result(timeout=0)
            except Exception:  # counted by the fleet as an error; training goes on
                row[metric(self.cfg.aux.evaluate, EVAL_ERRORS)] = 1
                continue
            row[metric(self.cfg.aux.evaluate, EVAL_LOSS)] = float(reply["loss"])
            row[metric(self.cfg.aux.evaluate, EVAL_VERSION)] = int(reply["version"])
        self.evaluations = left
        self.last_scores.update(row)
        return row

    def close(self, wait: bool = True, writer: bool | None = None) -> dict:
        """Stop the refresh group and the clients. The writer of the last step (`writer`;
        None: rank 0, the writer without torchft) returns its refresh counts and, after
        waiting (`wait`, up to each evaluation's deadline) for the evaluations still
        running, the newest scores (the run's summary shows them)."""
        self.stopped.set()
        final: dict = {}
        for _, future in self.evaluations if wait else []:
            try:
                future.result()
            except Exception:
                pass
        if self.rank == 0 if writer is None else writer:
            self._scores()
            final.update(self.last_scores)
        if self.sender is not None:
            self.sender.close()
            final.update({f"refresh_{k}": v for k, v in self.sender.stats().items()})
        for client in self.clients.values():
            client.close()
        return final


def locate() -> tuple[str | None, float | None]:
    """(this process's Ray node id, its node's share of the training ranks: local ÷ world
    size), each None where Ray or Ray Train does not say (then no worker is called directly,
    or the node keeps all its calls)."""
    try:
        import ray

        if not ray.is_initialized():
            return None, None
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # not in a Ray process
        return None, None
    try:
        from ray import train

        ctx = train.get_context()
        share = ctx.get_local_world_size() / max(1, ctx.get_world_size())
    except Exception:  # not a Ray Train worker
        share = None
    return here, share


def unwrap(model):
    """The module under DDP (`.module`)."""
    return getattr(model, "module", model)


def full_state(model) -> dict:
    """The model's whole weights: its state dict, with each FSDP-sharded (DTensor) entry
    gathered in turn (`full_tensor`, a collective of the ranks that share the model copy),
    so no more than one parameter is gathered at a time beyond what is kept."""
    out = {}
    for name, value in unwrap(model).state_dict().items():
        out[name] = value.full_tensor() if hasattr(value, "full_tensor") else value
    return out
