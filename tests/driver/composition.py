"""The composition matrix of the driver's parts on the 2x2 shape (docs/driver.md,
"Composition"): what each cell composes and what it must do.

Axes: the stepper (plain, ft), auxiliary services (none; encoder + evaluator with weight
refresh), DiLoCo (off; a learner with a synchronizer), FSDP (1, 2), data (in process; the
shared-memory pipeline with 2 producers). A cell trains (to the end, with a falling loss,
and resumes exactly from its middle checkpoint) or is refused at composition with one line
naming both settings (`REFUSED`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

SHAPE = ["shape.nodes=2", "shape.gpus_per_node=2", "shape.accelerator=cpu", "shape.cpus_per_gpu=1"]
AXES = {
    "stepper": {"plain": [], "ft": ["ft=on"]},
    "services": {"noaux": ["aux=none"], "aux": ["aux=encode_eval"]},
    "diloco": {"nodiloco": []},
    "fsdp": {"fsdp1": ["parallelism.fsdp_size=1"], "fsdp2": ["parallelism.fsdp_size=2"]},
    "data": {
        "inprocess": ["data.loader=inprocess"],
        "pipeline": ["data.loader=pipeline", "data.producers=2"],
    },
}
REFUSED = {
    # replica groups of several workers are issue 28's (node-scale fault tolerance)
    (("stepper", "ft"), ("fsdp", "fsdp2")): ("parallelism.fsdp_size", "ft.enabled"),
}
"""(two axis values) -> the key the one line names first and the other setting it names."""


@dataclass(frozen=True)
class Cell:
    values: dict

    @property
    def name(self) -> str:
        return "-".join(self.values.values())

    @property
    def overrides(self) -> list[str]:
        return [word for axis, value in self.values.items() for word in AXES[axis][value]]

    @property
    def refusal(self) -> tuple[str, str] | None:
        pairs = set(self.values.items())
        for (a, b), names in REFUSED.items():
            if a in pairs and b in pairs:
                return names
        return None


def cells() -> list[Cell]:
    """Every cell of the matrix, in axis order."""
    names = list(AXES)
    return [
        Cell(dict(zip(names, values, strict=True)))
        for values in itertools.product(*(AXES[axis] for axis in names))
    ]
