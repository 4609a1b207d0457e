"""Healing loads what a peer sends weights-only (driver.ft.transport): a model's and an
optimizer's state come through; an object that would run code on unpickling does not."""

from __future__ import annotations

import http.server
import io
import threading
from datetime import timedelta

import pytest
import torch
from torch.distributed._serialization import _streaming_save

from driver.ft.transport import WeightsOnlyHTTPTransport


class Payload:
    def __reduce__(self):
        return (print, ("ran code",))


def serve(obj) -> tuple[str, http.server.HTTPServer]:
    buf = io.BytesIO()
    _streaming_save(obj, buf)
    body = buf.getvalue()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server API)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server


def test_state_dicts_load_and_code_does_not():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    state = {
        "user": {"default": {"model": model.state_dict(), "optimizer": opt.state_dict()}},
        "torchft": {"step": 3, "batches_committed": 6},
    }
    url, server = serve(state)
    got = WeightsOnlyHTTPTransport._load_from_address(url, timedelta(seconds=10))
    server.shutdown()
    assert torch.equal(got["user"]["default"]["model"]["weight"], model.weight.detach())
    assert got["user"]["default"]["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    url, server = serve({"evil": Payload()})
    with pytest.raises(Exception, match="[Ww]eights only load failed|Unsupported global"):
        WeightsOnlyHTTPTransport._load_from_address(url, timedelta(seconds=10))
    server.shutdown()
