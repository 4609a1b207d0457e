"""A DiLoCo learner that is a torchft run: every replica group holds the same sync state,
the lowest live group talks to the synchronizer, and each merge rides on a step's vote.

    learner = FtLearner(cfg.diloco, model, group, groups)
    ft = FtReplica(..., state={..., "diloco": learner})   # heals with the group's state
    ft.outer = learner            # FtReplica.commit: exchange() before the vote, voted() after
    learner.start(model)          # before the first step (no network)
    learner.after_step(step, model)   # after each committed step, on every live group
    learner.finish(model); learner.close()

The parts (one `learner.Learner` per streaming fragment, without a connection of their
own) keep the state: the shared weights of the round (`base`), the snapshot, residual and
packed pseudo-gradient (`outbox`) of a push in flight, the round, the steps. Every group
computes them alike from the same weights (torchft keeps the groups' weights equal), so
every group reaches a sync point at the same committed step and holds the same push.

Who talks: the lowest live group of the step's quorum (`plan.position == 0`) sends the
join at the start, each push at a sync point, and again a push in flight (its `outbox`) or
a join that no live group is waiting on (its sender died). A group that sent a request
keeps its connection and polls for the answer, whatever its place.

How a merge reaches every group (`exchange`, inside each step, before torchft's commit
vote): each group says through torchft's process group, per part, whether it holds an
answer (its kind), has a request outstanding, and whether the groups should wait for it
(a join up to `join_timeout_s`, a barrier push up to `barrier_timeout_s`); the lowest
group holding an answer sends its round and new shared weights in a second allreduce
(the others add zeros). The groups apply it after the step only if the vote passes
(`voted`, then `after_step`): a group lost during the exchange fails the vote, nobody
applies, and the answer is exchanged again in the next step (or, lost with its holder, the
push is sent again and answered by the synchronizer with the shared weights). A merge is
applied with the step whose vote it rode on, so under torchft `barrier` keeps at most one
step in flight, and `delta` keeps it. A healing group receives the learner's state with
the model's (`state_dict`): the round, the weights of the round and the push in flight.

At the end (`finish`) no step is left to carry a merge: the group that holds a push in
flight waits for its answer and merges it alone (the lowest live group, which writes the
final checkpoint).
"""

from __future__ import annotations

import logging
import time

import torch

from driver.config.diloco import LearnerConfig
from driver.diloco import outer, weights
from driver.diloco.learner import KINDS, Learner, Update, several_ranks
from driver.diloco.streaming import Parts, fragment_names
from driver.ft.manager import group_ok

log = logging.getLogger("driver.diloco.replicas")
HOLDS, OWNS, WAITS = 0, 1, 2
"""A group's row of the exchange table, per part: the kind of answer it holds (1 + its
index in learner.KINDS, 0: none), a request outstanding, whether to wait for its answer."""
POLL_S = 0.5
"""How long a group with requests outstanding polls between two tables while the groups
wait (the others wait in the allreduce: far below `ft.timeout_s`)."""


class FtLearner(Parts):
    """The learner of one torchft replica group (same methods as learner.Learner)."""

    def __init__(self, cfg: LearnerConfig, model: torch.nn.Module, group: int, groups: int):
        names = fragment_names(cfg, model)
        self.parts = [Learner(cfg, f, n, talks=False) for f, n in enumerate(names)]
        self.cfg, self.model, self.group, self.groups = cfg, model, group, groups
        self.joining = [True] * len(self.parts)  # a part's learner must (re)join
        self.asked: list[tuple[str, int] | None] = [None] * len(self.parts)  # our request
        self.position: int | None = None  # this group's place in the step's quorum
        self.exchanged: list[Update | None] = [None] * len(self.parts)
        self.committed: list[Update | None] = [None] * len(self.parts)
        self.waited = 0.0  # seconds the exchanges waited for an answer
        self.member = self.parts[0].rank  # this worker's rank in its group: 0 talks
        self.device = next(iter(weights.named(model).values())).device  # NCCL: CUDA tensors

    # ---- the loop's calls (driver.trainer.hooks.DilocoHook) ----------------------------

    def start(self, model: torch.nn.Module) -> None:
        """Before the first step: the weights of the round (no network: the lowest live
        group joins inside the first step, once the quorum says who that is)."""
        for part in self.parts:
            part.latest = part._read(model)
            if not part.resumed:
                part.base = part.snapshot = part.latest

    def after_step(self, step: int, model: torch.nn.Module) -> None:
        """After each committed step, on every live group: the merge the step's vote
        carried, then the sync point of each part whose turn it is."""
        for i, part in enumerate(self.parts):
            update, self.committed[i] = self.committed[i], None
            if update is not None and self._fresh(i, update):
                self._adopt(i, model, update, step)
            self._settle(i)
            if part._tick() and not part.in_flight and not self.joining[i]:
                if part._next_push(model, step) is None:  # not finite (every group alike):
                    self.joining[i] = True  # join again and take the shared weights whole
                elif self._talks():  # every group holds the same push; one sends it
                    self._push(i)

    def finish(self, model: torch.nn.Module) -> None:
        """The last push in flight: the group that sent it waits for the answer and merges
        it alone (every member of that group, through the group's process group)."""
        for i, part in enumerate(self.parts):
            if part.client and part.pending and part.in_flight and self._current(i):
                part._wait(model, self.cfg.barrier_timeout_s, part.local_steps - 1)
            self._settle(i)  # an answer held since the last exchange counts too
            part._share(model, part.local_steps - 1)

    # ---- inside each step's vote (driver.ft.replica.FtReplica.commit) -----------------

    def exchange(self, manager, plan) -> None:
        """Every live group, before the vote: agree on the answers to apply after it."""
        self.position = plan.position if plan is not None else None
        self.exchanged = [None] * len(self.parts)
        talked, waiting = False, None
        while group_ok(manager, self.device):  # the group's members decide as one
            for i in range(len(self.parts)):
                self._poll(i, 0.0)
            table = self._table(manager)
            if waiting is not None:  # the owner polled, the others waited in the allreduce
                self.waited, waiting = self.waited + time.time() - waiting, None
            if table is None:
                return
            for i in range(len(self.parts)):
                holders = torch.nonzero(table[i, :, HOLDS]).flatten().tolist()
                if holders and self.exchanged[i] is None:
                    self.exchanged[i] = self._send(manager, i, holders[0], table)
                    if self.exchanged[i] is None:
                        return
            orphans = [i for i in range(len(self.parts)) if self._orphan(i, table)]
            if orphans and not talked and self._talks():
                for i in orphans:
                    self._ask_again(i)
            waits = any(
                self.exchanged[i] is None and table[i, :, WAITS].any()
                for i in range(len(self.parts))
            )
            if not (waits or (orphans and not talked and self._waits_for(orphans))):
                return
            talked = talked or bool(orphans)
            waiting = time.time()
            asking = [i for i, part in enumerate(self.parts) if part.client and part.pending]
            for i in asking:  # POLL_S in all: the others wait in the next allreduce
                self._poll(i, POLL_S / len(asking))

    def voted(self, ok: bool) -> None:
        """After the vote: the exchanged answers are applied by `after_step` if it passed."""
        if ok:
            self.committed = list(self.exchanged)
        self.exchanged = [None] * len(self.parts)

    # ---- the group's heal state (driver.ft.replica: FtReplica's state) ----------------

    def state_dict(self) -> dict:
        out = {}
        for i, part in enumerate(self.parts):
            out[f"fragment{part.fragment}"] = {
                "round": part.round,
                "local_steps": part.local_steps,
                "in_flight": part.in_flight,
                "joining": self.joining[i],
                "base": part.base,
                "snapshot": part.snapshot,
                "latest": part.latest,
                "residual": part.residual,
                "outbox": part.outbox,
            }
        return out

    def load_state_dict(self, state: dict) -> None:
        """A healing group: the live group's learner state (its own requests stay)."""
        for i, part in enumerate(self.parts):
            saved = state[f"fragment{part.fragment}"]
            part.round, part.local_steps = int(saved["round"]), int(saved["local_steps"])
            part.in_flight, self.joining[i] = bool(saved["in_flight"]), bool(saved["joining"])
            for key in ("base", "snapshot", "latest", "residual"):
                setattr(part, key, outer.clone(saved[key]) if saved[key] else {})
            part.outbox = saved["outbox"]

    # ---- the parts -----------------------------------------------------------------

    def _adopt(self, i: int, model: torch.nn.Module, update: Update, step: int) -> None:
        part = self.parts[i]
        part._adopt(model, update, step)
        self.joining[i] = False
        if update.kind != "same":
            part.in_flight, part.outbox = False, None

    def _fresh(self, i: int, update: Update) -> bool:
        return fresh(update.kind, update.round, self.parts[i].round, self.joining[i])

    def _poll(self, i: int, timeout_s: float) -> None:
        """A group with a request outstanding: its answer, if any (kept as part.update);
        the request sent again when unanswered for `retry_s`."""
        part = self.parts[i]
        if part.client is not None and part.pending:
            part._poll(self.model, part.local_steps - 1, timeout_s)
            if part.pending is None and not part.offering:
                self.asked[i] = None
            elif self._current(i) and time.time() - part.pending[1] > self.cfg.retry_s:
                self._ask_again(i)
        self._settle(i)

    def _settle(self, i: int) -> None:
        """Drop an answer that the part's state has moved past (another group's answer,
        applied by every group, settled it)."""
        part = self.parts[i]
        if part.update is not None and not self._fresh(i, part.update):
            part.update = None

    def _row(self, i: int) -> list[float]:
        part, asked = self.parts[i], self.asked[i]
        holds = KINDS.index(part.update.kind) + 1 if part.update is not None else 0
        current = self._current(i)
        limit = self.cfg.join_timeout_s if asked and asked[0] == "join" else 0.0
        if asked and asked[0] == "push" and self.cfg.mode == "barrier":
            limit = self.cfg.barrier_timeout_s
        waits = current and time.time() - part.pending[1] < limit
        return [float(holds), float(current), float(waits)]

    def _talks(self) -> bool:
        """Whether this worker talks for the run: the first of the lowest live group."""
        return self.position == 0 and self.member == 0

    def _ask(self, i: int) -> tuple[str, int]:
        """What the part's state asks of the synchronizer now: a join, or a push."""
        return ("join" if self.joining[i] else "push", self.parts[i].round)

    def _current(self, i: int) -> bool:
        """Whether this group has the request the part's state needs outstanding."""
        return self.parts[i].pending is not None and self.asked[i] == self._ask(i)

    def _ask_again(self, i: int) -> None:
        """Send what the state needs: the join, or the push in flight."""
        if self.joining[i]:
            self._join(i)
        else:
            self._push(i)

    def _table(self, manager) -> torch.Tensor | None:
        """Every group's rows, summed through torchft's process group (None: it failed).
        A group's row is its first worker's, which the others of its group receive."""
        rows = torch.tensor([self._row(i) for i in range(len(self.parts))], device=self.device)
        if several_ranks():
            torch.distributed.broadcast(rows, 0)
        table = torch.zeros(len(self.parts), self.groups, 3, device=self.device)
        table[:, self.group] = rows
        return table.cpu() if _allreduce(manager, table, self.device) else None

    def _orphan(self, i: int, table: torch.Tensor) -> bool:
        """A join or push that the state needs and no live group has outstanding."""
        need = self.joining[i] or self.parts[i].in_flight
        return need and self.exchanged[i] is None and not table[i, :, :WAITS].any()

    def _waits_for(self, orphans: list[int]) -> bool:
        """Whether the groups wait for the answer to the requests just sent."""
        return any(self.joining[i] or self.cfg.mode == "barrier" for i in orphans)

    def _send(self, manager, i: int, holder: int, table: torch.Tensor) -> Update | None:
        """The holder's answer to every group (a second allreduce); None if it failed."""
        part = self.parts[i]
        kind = KINDS[int(table[i, holder, HOLDS]) - 1]
        mine = part._mine(self.model)
        size = 0 if kind == "same" else sum(p.numel() for p in mine.values())
        flat = torch.zeros(3 + size, device=self.device)
        if holder == self.group:
            if self.member == 0:  # it holds the answer; the others of its group receive it
                update = part.update
                flat[:3] = torch.tensor([update.round, float(update.offered), 0.0])
                if size:
                    flat[3:] = torch.cat([update.base[k].reshape(-1) for k in mine])
            if several_ranks():
                torch.distributed.broadcast(flat, 0)
        if not _allreduce(manager, flat, self.device):
            return None
        flat = flat.cpu()
        base, offset = None, 3
        if size:
            base = {}
            for k, p in mine.items():
                base[k] = flat[offset : offset + p.numel()].view(tuple(p.shape)).clone()
                offset += p.numel()
        return Update(kind, int(flat[0]), base, bool(flat[1]))

    def _client(self, part: Learner) -> None:
        """The connection of the worker that talks (the first of its group)."""
        if part.client is None and self.member == 0:
            from driver.diloco.link import Client

            part.client = Client(self.cfg.address, self.cfg.curve())

    def _join(self, i: int) -> None:
        part = self.parts[i]
        self._client(part)
        digest = "" if part.reset else outer.digest(part.base)  # "": the weights, whole
        body = {"learner": self.cfg.learner, "digest": digest, "fragment": part.fragment}
        part.pending = (part.client.request("join", body), time.time())
        self.asked[i] = self._ask(i)
        log.info("group %d joins for %s (fragment %d)", self.group, self.cfg.learner, i)

    def _push(self, i: int) -> None:
        """Send the push in flight (the talker at a sync point, or a push nobody owns)."""
        part = self.parts[i]
        self._client(part)
        body = {"learner": self.cfg.learner, "round": part.round, "step": part.local_steps - 1,
                "grad": part.outbox, "fragment": part.fragment}  # fmt: skip
        before = part.client.sent_bytes
        part.pending = (part.client.request("push", body), time.time())
        part.pushes.append({"step": part.local_steps - 1, "bytes": part.client.sent_bytes - before})
        self.asked[i] = self._ask(i)

    @property
    def wait_s(self) -> float:
        """Seconds this group spent in exchanges waiting for an answer, and at the end."""
        return self.waited + super().wait_s


def fresh(kind: str, answer_round: int, round_: int, joining: bool) -> bool:
    """Whether an answer still applies to a part at `round_`: a delta to the next round
    only (it was computed against this round's weights), the shared weights (or `same`)
    of a newer round, or of this very round to a join. Any other answer was settled by
    another group's, which every group applied."""
    if kind == "delta":
        return answer_round == round_ + 1
    return answer_round > round_ or (joining and answer_round == round_)


def _allreduce(manager, tensor: torch.Tensor, device) -> bool:
    """SUM `tensor` across the live groups through torchft; False if it failed for any
    member of this group (driver.ft.manager.group_ok: the members go on alike). A member
    whose own collective failed aborts its process group, so a peer blocked in it fails
    now, as sum_grads does."""
    manager.allreduce(tensor, reduce_op=torch.distributed.ReduceOp.SUM).wait()
    if manager.errored():
        manager._pg.abort()
    return group_ok(manager, device)
