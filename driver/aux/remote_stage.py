"""A stage run by auxiliary workers: the data pipeline's user of the auxiliary-service layer.

One service (e.g. an expensive decoder or encoder on auxiliary workers) serves the
producers of several training ranks. The producers' side is a normal stage, so sampling,
collation, shared memory, resume and the corrupt-sample policy are unchanged:

    serve_stage(Decode(), "tcp://*:5555")                     # one worker and its proxy
    DataPipeline(ds, cfg, rank, world, stages=[RemoteStage("tcp://aux-0:5555", "decode")])
    RemoteStage({"tcp://aux-0:41000": 4, "tcp://aux-1:41000": 4}, "decode")  # proxies

A request is method "process" with payload {"sample": sample, "ctx": [index, epoch, seed,
rank]} in the wire format of `driver.messaging.wire` (JSON plus raw array frames, no pickle); the
rank is the fair-queue key at the workers. A stage's exception comes back as
`AuxRemoteError` and raises in the producer like a local stage would; a service that stops
answering trips `sample_timeout_s` (the call's own deadline is longer by default).
"""

from __future__ import annotations

import tempfile
import threading
from typing import Any

from driver.aux.client import AuxClient
from driver.aux.errors import AuxRemoteError
from driver.aux.handler import RequestContext
from driver.aux.proxy import ProxyServer
from driver.aux.worker import WorkerServer
from driver.data.stages import SampleContext, Stage, WorkerInfo

METHOD = "process"


class StageHandler:
    """A `driver.aux` Handler serving one data `Stage` (method "process")."""

    torch_arrays = True  # samples reach the stage as they were sent (tensors as tensors)

    def __init__(self, stage: Stage, worker: WorkerInfo | None = None):
        self.stage = stage
        self.worker = worker or WorkerInfo("service", 0, -1)

    def setup(self) -> None:
        self.stage.setup(self.worker)

    def ready(self) -> dict:
        return {"stage": self.stage.name}

    def handle(self, method: str, payload: dict, ctx: RequestContext) -> dict:
        if method != METHOD:
            raise ValueError(f"stage {self.stage.name} has no method {method!r}")
        sample_ctx = SampleContext(*(int(value) for value in payload["ctx"]))
        return {"sample": self.stage.process(payload["sample"], sample_ctx)}

    def teardown(self) -> None:
        self.stage.teardown()


class RemoteStage(Stage):
    """A stage whose work is done by `StageHandler` workers behind `proxies`: one address
    (weight 1) or {proxy address: live workers}, and the `workers` on the producers' node
    called directly (`AuxClient`'s `workers` and `node_share`)."""

    def __init__(self, proxies: str | dict[str, int], name: str = "remote", deadline_s=3600.0,
                 workers: list[str] | tuple = (), node_share: float | None = None):  # fmt: skip
        self.proxies = {proxies: 1} if isinstance(proxies, str) else dict(proxies)
        self.name = name
        self.deadline_s = deadline_s
        self.workers, self.node_share = list(workers), node_share

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        raise RuntimeError(f"stage {self.name} runs at {list(self.proxies)}; use client()")

    def client(self, worker: WorkerInfo) -> RemoteStageClient:
        return RemoteStageClient(self.proxies, self.name, worker.rank, self.deadline_s,
                                 self.workers, self.node_share)  # fmt: skip


class RemoteStageClient:
    """One AuxClient per producer process (thread-safe: fetch threads share it)."""

    def __init__(self, proxies: dict[str, int], name: str, rank: int, deadline_s: float,
                 workers: list[str] | tuple = (), node_share: float | None = None):  # fmt: skip
        self.name = name
        self.aux = AuxClient(name, max(rank, 0), proxies, deadline_s=deadline_s, torch=True,
                             workers=workers, node_share=node_share)  # fmt: skip

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        payload = {"sample": sample, "ctx": [ctx.index, ctx.epoch, ctx.seed, ctx.rank]}
        try:
            return self.aux.call(METHOD, payload)["sample"]
        except AuxRemoteError as err:  # the producer reports it with the sample's index
            raise RuntimeError(f"{self.name} service: {err}") from None

    def close(self) -> None:
        self.aux.close()


def serve_stage(stage: Stage, address: str, stop: Any = None, poll_s: float = 0.2) -> None:
    """Serve `stage` at `address` (a proxy bound there, one worker behind it) until `stop`
    (an Event) is set; requests from any number of producers and ranks, fair per rank."""
    handler = StageHandler(stage)
    handler.setup()
    stop = stop or threading.Event()
    with tempfile.TemporaryDirectory(prefix="aux-stage-") as folder:
        worker = WorkerServer(handler, f"ipc://{folder}/worker.sock")
        proxy = ProxyServer(stage.name, [worker.start()], bind=address)
        proxy.start()
        try:
            while not stop.wait(poll_s):
                pass
        finally:
            proxy.stop()
            worker.stop()
            handler.teardown()
