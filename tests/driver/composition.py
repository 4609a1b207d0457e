"""The composition matrix of the driver's parts on the 2x2 shape (docs/driver.md,
"Composition"): what each cell composes and what it must do.

Axes: the stepper (plain, ft), auxiliary services (none; encoder + evaluator with weight
refresh), DiLoCo (off; a learner of a synchronizer), FSDP (1, 2), data (in process; the
shared-memory pipeline with 2 producers). A cell trains (to the end, with a falling loss,
and resumes from its middle checkpoint) or is refused at composition with one line naming
both settings (`REFUSED`).

The whole product is 32 cells of two runs each; the tests run `pairwise()`, the cells that
hold every pair of settings of two axes at least once (a covering array: the parts
compose pair by pair, so a pair that does not compose fails a cell), 6 cells.
`python -m tests.driver.composition` prints them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

SHAPE = ["shape.nodes=2", "shape.gpus_per_node=2", "shape.accelerator=cpu", "shape.cpus_per_gpu=1"]
LEARNER = "learner"
"""The DiLoCo axis' value of a learner: its overrides name the cell's own synchronizer
(`Cell.overrides(address, keys)`)."""
AXES = {
    "stepper": {"plain": [], "ft": ["ft=on"]},
    "services": {"noaux": ["aux=none"], "aux": ["aux=encode_eval"]},
    "diloco": {"nodiloco": [], LEARNER: ["diloco.learner=a", "diloco.sync_every=2"]},
    "fsdp": {"fsdp1": ["parallelism.fsdp_size=1"], "fsdp2": ["parallelism.fsdp_size=2"]},
    "data": {
        "inprocess": ["data.loader=inprocess"],
        "pipeline": ["data.loader=pipeline", "data.producers=2"],
    },
}
REFUSED: dict = {}
"""(two axis values) -> the key the one line names first and the other setting it names.
None today: under ft, FSDP runs inside replica groups of several workers; a DiLoCo learner
is a run of any layout."""


@dataclass(frozen=True)
class Cell:
    values: dict

    @property
    def name(self) -> str:
        return "-".join(self.values.values())

    @property
    def learner(self) -> bool:
        return self.values["diloco"] == LEARNER

    def overrides(self, address: str | None = None, keys: str | None = None) -> list[str]:
        """The cell's config words (a learner's with its synchronizer's address and keys)."""
        words = [word for axis, value in self.values.items() for word in AXES[axis][value]]
        if self.learner:
            words += [f"diloco.address={address}", f"diloco.keys={keys}"]
        return words

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


def pairs_of(cell: Cell) -> set[tuple]:
    """The pairs of settings of two axes the cell holds."""
    return set(itertools.combinations(cell.values.items(), 2))


def pairwise() -> list[Cell]:
    """Cells that hold every pair of settings at least once: greedily, the cell holding
    the most pairs not yet held (the first such in axis order), until none is left."""
    every = cells()
    left = set().union(*(pairs_of(cell) for cell in every))
    chosen: list[Cell] = []
    while left:
        best = max(every, key=lambda cell: len(pairs_of(cell) & left))
        chosen.append(best)
        left -= pairs_of(best)
    return chosen


if __name__ == "__main__":
    for cell in pairwise():
        print(cell.name)
