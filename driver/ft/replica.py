"""One replica group's side of torchft: a Manager, the step protocol, liveness, healing.

    ft = FtReplica(cfg.ft, group=rank, groups_at_start=world, lighthouse=addr, gate=gate,
                   state={"model": model, "optimizer": opt, "scheduler": sched})
    while ft.step < steps:
        plan = ft.begin_step()                 # quorum; heals a (re)joining group first
        for slot in plan.slots:                # this group's micro-batch slots
            loss = loss_fn(model, batch(plan.step, slot)) / plan.divisor
            loss.backward()
        total = ft.reduce(model.parameters(), loss_sum)   # SUM across live groups
        if ft.commit(optimizer, scheduler):    # all-or-nothing: every group or none steps
            ...                                # the step counts; else it is run again
    ft.close()

A group is one process group of its own (here: one worker, as Ray Train 2.60 builds
them). Quorums are synchronous (`use_async_quorum=False`), so the live groups, and
therefore the slot plan, are known before the forward pass. A failed collective or a lost
peer makes `commit` return False on every live group; the next `begin_step` forms a
quorum without the lost group and the same step runs again. Below `ft.min_replicas` no
quorum forms: `begin_step` raises FtStopped with one line giving the reason. A member of a
group of several whose group's rank 0 (the group's quorum server) is gone raises
FtGroupLost instead, a failure of its group only.

A group started again (Ray Train replaced it, or restarted the whole worker group) reads
no checkpoint before its first quorum: `ft.restore = read_newest` defers the read. When the
first quorum has a live group ahead, torchft heals this group from it (weights, optimizer
and step, over driver.ft.transport) and `restore` is never called; only when no group is
ahead (a full restart: every group is back at step 0) does `begin_step` call it and train on
from the checkpoint's step.

The Manager itself and the flat gradient SUM are driver.ft.manager's; the slot plan and the
reason no quorum formed, driver.ft.plan's.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from driver.config.ft import FtConfig
from driver.ft.manager import build_manager, group_ok, live_groups, sum_grads
from driver.ft.plan import StepPlan, no_quorum_reason, quorum_failure, step_plan
from driver.ft.shards import like, local_tree
from driver.ft.shrink import ShrinkRequest, local_shrink

log = logging.getLogger("driver.ft")


class FtStopped(RuntimeError):
    """Too few replica groups are left to train on; the message is the one-line reason."""


class FtGroupLost(RuntimeError):
    """This member's replica group lost its rank 0 (the group's quorum server): a worker
    failure like a member's death, so Ray Train replaces the whole group, which heals from a
    live one (driver.ft.plan.quorum_failure); never the end of the run."""


RUN_COUNTERS = ("ft_failures_survived", "ft_steps_degraded")
"""Counters of the run, not of one group: a healing group receives them with the state."""
RUN_KEY = "ft_run"


class FtReplica:
    """torchft Manager of one replica group of one worker, plus the step protocol."""

    def __init__(
        self,
        cfg: FtConfig,
        group: int,
        groups_at_start: int,
        lighthouse: str | None,
        state: dict,
        grad_accum: int = 1,
        gate: str | None = None,
        host: str = "127.0.0.1",
        shrink: Callable[[ShrinkRequest], None] | None = None,
        decider=None,
        group_rank: int = 0,
        group_size: int = 1,
        device: str = "cpu",
    ):
        from driver.ft.lighthouse import pass_gate

        self.cfg, self.group, self.start_groups = cfg, group, groups_at_start
        self.grad_accum, self.state = grad_accum, state
        self.shrink = shrink or local_shrink
        self.decider = decider
        """A driver.ft.lost.ShrinkDecider: which missing groups are lost, not late; every
        group feeds it every quorum, the lowest live group asks (None: ask on the first
        smaller quorum, naming no pod)."""
        self.group_rank, self.group_size, self.device = group_rank, group_size, device
        self.manager, self._store = build_manager(
            cfg, group, lighthouse, host, load_state_dict=self._load,
            state_dict=self._state_dict, group_rank=group_rank, group_size=group_size,
            device=device,
        )  # fmt: skip
        if gate:
            pass_gate(gate, cfg.start_timeout_s)
        self.plan: StepPlan | None = None
        self.outer = None
        """A DiLoCo learner's exchange (driver.diloco.replicas.FtLearner): `exchange(manager,
        plan)` inside each step before the vote, `voted(ok)` after it, so a merge is applied
        by every group or by none."""
        self.run_notice: Callable[[], float | None] | None = None
        """The run's stop notice as this member polls it (the driver's SIGTERM or SIGINT:
        driver.channel.stops.NoticePoll.run): it rides on the step's reduce, so every live
        group learns it after the same step (`run_stop_at`)."""
        self.run_stop_at: float | None = None
        """The notice's wall-clock time once a committed step's reduce carried it from any
        live group (None: not yet), the same step for every live group's same member."""
        self._rider: list[float] = []
        self.restore: Callable[[], int] | None = None
        """Set on a group started again: reads the newest checkpoint, returns its step (0:
        none). Called at the first quorum only if no live group is ahead to heal from."""
        self._last_live: int | None = None
        self.counters = {
            "ft_quorum_size": 0,
            "ft_failures_survived": 0,
            "ft_steps_degraded": 0,
            "ft_heals": 0,
            "ft_restores": 0,
            "ft_failed_commits": 0,
            "ft_quorum_s": 0.0,
            "ft_reduce_s": 0.0,
            "ft_reduce_copied_bytes": 0,
            "ft_commit_s": 0.0,
        }

    # ---- state for healing ------------------------------------------------------------

    def _state_dict(self) -> dict:
        """This member's state: its own shards (driver.ft.shards), the run's counters."""
        sd = {name: local_tree(obj.state_dict()) for name, obj in self.state.items()}
        return {**sd, RUN_KEY: {k: self.counters[k] for k in RUN_COUNTERS}}

    def _load(self, sd: dict) -> None:
        for name, obj in self.state.items():
            obj.load_state_dict(like(obj, sd[name]))
        self.counters.update(sd.get(RUN_KEY, {}))  # the run's counts go on in this group
        self.counters["ft_heals"] += 1
        log.warning("ft: group %d healed from a live peer at step %d", self.group, self.step)

    # ---- the step protocol ------------------------------------------------------------

    @property
    def step(self) -> int:
        """Steps committed so far (after healing: the live groups' count)."""
        return self.manager.current_step()

    def begin_step(self) -> StepPlan:
        """Join this step's quorum (healing first if behind) and return the slot plan."""
        started = time.perf_counter()
        try:
            self.manager.start_quorum()
            live, position = self.manager.num_participants(), self.manager.participating_rank()
        except Exception as err:  # the group's rank 0 is gone, or no quorum formed
            self._quorum_failed(err, time.perf_counter() - started)
        self.counters["ft_quorum_s"] += time.perf_counter() - started
        if self.restore is not None:
            self._restore_if_alone()
        ids, me = live_groups(self.manager), self.group
        if len(ids) != live or me not in ids:  # ids unknown: plan by position (one split)
            ids, me = tuple(range(live)), position
        self._note_quorum(live, position, ids)
        self.plan = step_plan(
            self.cfg, self.step, ids, position, me, self.start_groups, self.grad_accum,
            group_size=self.group_size, member=self.group_rank,
        )  # fmt: skip
        return self.plan

    def _quorum_failed(self, err: Exception, waited_s: float) -> NoReturn:
        """Raise what a failed quorum call means (driver.ft.plan.quorum_failure)."""
        if quorum_failure(self.group_rank, waited_s, self.cfg.quorum_timeout_s) == "group lost":
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise FtGroupLost(
                f"ft: replica group {self.group} lost its rank 0 (the group's quorum server) "
                f"at step {self.step}; the group is replaced ({first})"
            ) from None
        raise FtStopped(
            no_quorum_reason(self.cfg, self.step, self._last_live, self.start_groups, err)
        ) from None

    def _restore_if_alone(self) -> None:
        """After a started-again group's first quorum: a live group ahead has healed it
        (its step moved); else every group is new, so all read the same newest checkpoint."""
        if not group_ok(self.manager, self.device):  # a member's healing failed: this step
            return  # fails on every member, the next quorum decides (restore reads as a group)
        restore, self.restore = self.restore, None
        if self.step > 0:
            return
        start = restore()
        if start:
            batches = start * self.start_groups
            self.manager.load_state_dict({"step": start, "batches_committed": batches})
            self.counters["ft_restores"] += 1
            log.warning("ft: group %d: no live group ahead, resumed at step %d", self.group, start)

    def _note_quorum(self, live: int, position: int, ids: tuple[int, ...]) -> None:
        last, self._last_live = self._last_live, live
        self.counters["ft_quorum_size"] = live
        if last is not None and live < last:
            self.counters["ft_failures_survived"] += last - live
            log.warning("ft: %d of %d replica groups left at step %d", live, last, self.step)
        asking = position == 0 and self.cfg.shrink  # the lowest live group asks
        if self.decider is not None:
            request = self.decider.quorum(ids, asking=asking)
        elif asking and last is not None and live < last:  # once, at the first smaller quorum
            request = ShrinkRequest(groups_before=last, groups_after=live)
        else:
            request = None
        if request is not None:
            threading.Thread(target=self._ask_shrink, args=(request,), daemon=True).start()

    def _ask_shrink(self, request: ShrinkRequest) -> None:
        try:
            self.shrink(request)
        except Exception as err:  # a shrink is an optimisation: training goes on
            log.warning("ft: shrink request failed: %s", err)

    def reduce(self, params, loss_sum: float = 0.0, midway=None) -> float:
        """SUM the gradients (and this member's loss contribution) across the live groups
        through torchft's process group, each in place (driver.ft.manager.sum_grads; a
        member sums with the same member of every other group). Returns the summed loss.
        On a failed collective the gradients are garbage and `commit` returns False."""
        started = time.perf_counter()
        heard = self.run_notice() if self.run_notice and self.run_stop_at is None else None
        rider = (1.0, heard) if heard is not None else (0.0, 0.0)  # (members that heard, time)
        total, allocated, self._rider = sum_grads(self.manager, params, loss_sum, midway, rider)
        self.counters["ft_reduce_s"] += time.perf_counter() - started
        self.counters["ft_reduce_copied_bytes"] = allocated
        return total

    def commit(self, optimizer, scheduler=None) -> bool:
        """The all-or-nothing vote: step the optimizer (and scheduler) only when every live
        group's step succeeded. Gradients are cleared either way."""
        started = time.perf_counter()
        if self.outer is not None:
            self.outer.exchange(self.manager, self.plan)
        ok = self.manager.should_commit()
        if self.outer is not None:
            self.outer.voted(ok)
        if ok:
            self._heard_run_stop()
            scale = self.plan.lr_scale if self.plan else 1.0
            saved = [g["lr"] for g in optimizer.param_groups]
            for g in optimizer.param_groups:
                g["lr"] = g["lr"] * scale
            optimizer.step()
            for g, lr in zip(optimizer.param_groups, saved, strict=True):
                g["lr"] = lr
            if scheduler is not None:
                scheduler.step()
            if self.plan and self.plan.live < self.start_groups:
                self.counters["ft_steps_degraded"] += 1
        else:
            self.counters["ft_failed_commits"] += 1
        optimizer.zero_grad(set_to_none=True)
        self.counters["ft_commit_s"] += time.perf_counter() - started
        return ok

    def _heard_run_stop(self) -> None:
        """After a passed vote: the run's notice if the step's reduce carried it (each
        member that heard sent the same time, the driver's). A time that is not finite or
        lies ahead of this clock (a skewed or garbled sum) is taken as now: the notice
        still stops the run, and its deadline never moves past what the driver allows."""
        if self.run_stop_at is None and len(self._rider) == 2 and self._rider[0] >= 0.5:
            at, now = self._rider[1] / self._rider[0], time.time()
            self.run_stop_at = at if math.isfinite(at) and at <= now else now
            log.warning("ft: group %d: the run's stop notice reached every live group by "
                        "step %d", self.group, self.step)  # fmt: skip

    @property
    def lowest_live(self) -> bool:
        """Whether this group is the lowest live one (the one that writes checkpoints)."""
        return self.plan is not None and self.plan.position == 0

    def metrics(self) -> dict:
        """The ft fields of the step's metrics row."""
        return dict(self.counters)

    def close(self) -> None:
        self.manager.shutdown(wait=False)

    # ---- leaving at once: this group's pod is being terminated (driver.ft.leave) -------

    left = False
    """Whether `leave` was called: the group trains no more."""

    def leave(self) -> None:
        """Leave the quorum now, between steps (after a commit, before the next
        `begin_step`, on the training thread; the group trains no more): its Manager stops
        heartbeating, so the Lighthouse forms the next quorum without it once its last
        heartbeat is `ft.heartbeat_timeout_ms` old. torchft's Lighthouse has no call to
        leave (torchft-nightly 2026.10.26: a group drops out when its heartbeats stop, or
        when it misses `ft.join_timeout_ms`). `close` afterwards is harmless."""
        if not self.left:
            self.left = True
            self.manager.shutdown(wait=False)
