"""Healing transport: torchft's HTTP checkpoint transport, loading weights-only.

torchft's own transports unpickle what a peer sends (`HTTPTransport` loads with
`weights_only=False`, `PGTransport` unpickles its metadata). Here the receiving group loads
with PyTorch's weights-only unpickler: tensors, numbers, strings and containers (a model's
and an optimizer's state dicts), nothing that runs code.
"""

from __future__ import annotations

import urllib.request
from datetime import timedelta

from torch.distributed._serialization import _streaming_load
from torchft.checkpointing.http_transport import HTTPTransport


class WeightsOnlyHTTPTransport(HTTPTransport):
    """`HTTPTransport` (one chunk) whose receiving side never runs a full unpickler."""

    def __init__(self, timeout: timedelta):
        super().__init__(timeout=timeout, num_chunks=0)

    @classmethod
    def _load_from_address(cls, address: str, timeout: timedelta) -> object:
        with urllib.request.urlopen(address, timeout=timeout.total_seconds()) as f:
            return _streaming_load(f, weights_only=True)
