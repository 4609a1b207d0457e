"""A stage run by another process over ZeroMQ: the transport of auxiliary-worker stages.

One service (e.g. an expensive decoder or encoder on auxiliary workers) serves the
producers of several training ranks. The producers' side is a normal stage, so sampling,
collation, shared memory, resume and the corrupt-sample policy are unchanged:

    serve_stage(Decode(), "tcp://*:5555")                          # on the auxiliary worker
    DataPipeline(ds, cfg, rank, world, stages=[RemoteStage("tcp://aux-0:5555", "decode")])

A request is [context, *codec.to_frames(sample)] (array buffers travel unpickled); the reply
is [b"ok", *frames] or [b"error", message], and an error raises in the producer like a
local stage would. A service that stops answering trips `sample_timeout_s`.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

from driver.data import codec
from driver.data.stages import SampleContext, Stage, WorkerInfo


class RemoteStage(Stage):
    """A stage whose work is done by `serve_stage` at `address` (any ZeroMQ endpoint)."""

    def __init__(self, address: str, name: str = "remote"):
        self.address = address
        self.name = name

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        raise RuntimeError(f"stage {self.name} runs at {self.address}; call client().process")

    def client(self, worker: WorkerInfo) -> RemoteStageClient:
        return RemoteStageClient(self.address, self.name)


class RemoteStageClient:
    """One REQ socket per calling thread (producers may fetch with several threads)."""

    def __init__(self, address: str, name: str):
        import zmq

        self.address, self.name = address, name
        self.context = zmq.Context()
        self.local = threading.local()
        self.sockets: list[Any] = []

    def _socket(self) -> Any:
        sock = getattr(self.local, "socket", None)
        if sock is None:
            import zmq

            sock = self.context.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.address)
            self.local.socket = sock
            self.sockets.append(sock)
        return sock

    def process(self, sample: Any, ctx: SampleContext) -> Any:
        sock = self._socket()
        head = pickle.dumps((ctx.index, ctx.epoch, ctx.seed, ctx.rank))
        sock.send_multipart([head, *codec.to_frames(sample)], copy=False)
        status, *frames = sock.recv_multipart(copy=False)
        if status.bytes != b"ok":
            raise RuntimeError(f"{self.name} service: {frames[0].bytes.decode()}")
        return codec.from_frames([frame.buffer for frame in frames])

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(0)
        self.context.term()


def serve_stage(stage: Stage, address: str, stop: Any = None, poll_s: float = 0.2) -> None:
    """Answer stage requests at `address` until `stop` (an Event) is set; requests from any
    number of producers and ranks are served one at a time, in arrival order."""
    import zmq

    context = zmq.Context()
    sock = context.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)
    stage.setup(WorkerInfo("service", 0, -1))
    try:
        while stop is None or not stop.is_set():
            if not sock.poll(int(poll_s * 1000)):
                continue
            head, *frames = sock.recv_multipart(copy=False)
            ctx = SampleContext(*pickle.loads(head.bytes))
            try:
                result = stage.process(codec.from_frames([f.buffer for f in frames]), ctx)
                sock.send_multipart([b"ok", *codec.to_frames(result)], copy=False)
            except Exception as err:  # the producer reports it with the sample's index
                sock.send_multipart([b"error", f"{type(err).__name__}: {err}".encode()])
    finally:
        stage.teardown()
        sock.close(0)
        context.term()
