"""DCP's default load planner with non-tensor entries loaded weights-only.

Its own module because it subclasses a DCP (torch.distributed.checkpoint) class: DCP takes
about a second to import, so it loads at the first load (driver/checkpoint/loading.py),
never at a worker's start-up.
"""

from __future__ import annotations

import torch
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner


class PlainLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, but non-tensor entries load weights-only."""

    def load_bytes(self, read_item, value) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
