"""DiLoCo's outer maths: pure functions on named tensors (`dict[str, Tensor]`, fp32, CPU).

A learner starts a round from the shared weights `base`; after H inner steps its
pseudo-gradient is `base - local`. The synchronizer averages the pseudo-gradients of the
learners present and takes one outer step on the shared weights (SGD with Nesterov momentum
by default, the DiLoCo paper's choice). Weights travel as the change of the learners' view of
the shared weights, optionally in bf16; `advance_view` keeps sender and receivers in step, so
rounding error is carried into the next round instead of piling up.

Nothing non-finite is merged, saved or sent: `check_update` refuses a tensor set with a NaN
or an infinity (or, given a bound, a value beyond it) with `Refused`, naming the tensor.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

Params = dict[str, torch.Tensor]
COMPRESSIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": None}
MERGE_RULES = ("delta", "replace")
MODES = ("barrier", "decoupled")
MAX_UPDATE = 1e4
"""The largest magnitude a pseudo-gradient element may have by default (weights move by
far less in H steps; a value beyond is a diverged learner, and would overflow fp16)."""


class Refused(ValueError):
    """An update that must not be merged or applied; `reason` is "non_finite" or
    "out_of_range"."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def check_update(params: Params, what: str, bound: float | None = None) -> None:
    """Raise Refused if a tensor of `params` holds a NaN or an infinity, or (with `bound`) a
    value of magnitude over `bound`."""
    for k, v in params.items():
        if v.numel() == 0:
            continue
        largest = float(v.detach().abs().max())  # NaN if any is NaN, inf if any is infinite
        if not math.isfinite(largest):
            raise Refused("non_finite", f"{what}: {k} holds non-finite values")
        if bound is not None and largest > bound:
            raise Refused("out_of_range", f"{what}: {k} holds {largest:.3g}, over {bound:g}")


def clone(params: Params) -> Params:
    """A detached fp32 CPU copy."""
    return {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in params.items()}


def zeros_like(params: Params) -> Params:
    return {k: torch.zeros_like(v) for k, v in params.items()}


def pseudo_gradient(base: Params, local: Params) -> Params:
    """How far a learner moved from the shared weights, as a gradient: `base - local`."""
    return {k: base[k] - local[k].float() for k in base}


def mean(grads: list[Params]) -> Params:
    """Element-wise mean of pseudo-gradients (of the learners present)."""
    if not grads:
        raise ValueError("no pseudo-gradients to average")
    return {k: torch.stack([g[k].float() for g in grads]).mean(0) for k in grads[0]}


def outer_step(
    shared: Params, momentum: Params, grad: Params, lr: float, mu: float, nesterov: bool = True
) -> tuple[Params, Params]:
    """One SGD step with momentum (PyTorch's convention, no dampening):
    `buf = mu * buf + g`; update `g + mu * buf` (Nesterov) or `buf`; `w - lr * update`."""
    new_shared, new_momentum = {}, {}
    for k, w in shared.items():
        buf = mu * momentum[k] + grad[k]
        update = grad[k] + mu * buf if nesterov else buf
        new_shared[k], new_momentum[k] = w - lr * update, buf
    return new_shared, new_momentum


def pack(params: Params, compression: str) -> dict:
    """Tensors as they travel: `{"t": {name: tensor}}` in `fp32`, `bf16` or `fp16`, or for
    `int8` each tensor scaled by its largest magnitude / 127 with the scales in `"s"`."""
    if compression == "int8":
        scales = {k: max(float(v.abs().max()), 1e-30) / 127.0 for k, v in params.items()}
        tensors = {
            k: (v / scales[k]).round().clamp(-127, 127).to(torch.int8) for k, v in params.items()
        }
        return {"t": tensors, "s": scales}
    return {"t": {k: v.to(COMPRESSIONS[compression]) for k, v in params.items()}}


def unpack(packed: dict, reference: Params, what: str) -> Params:
    """fp32 tensors from `pack`'s form, checked against `reference`'s names and shapes."""
    if not isinstance(packed, dict) or not isinstance(packed.get("t"), dict):
        raise ValueError(f"{what}: not a packed tensor set")
    tensors, scales = packed["t"], packed.get("s") or {}
    if not isinstance(scales, dict):
        raise ValueError(f"{what}: int8 scales are not a name -> scale object")
    check_like(tensors, reference, what)
    out = {}
    for k, v in tensors.items():
        if v.dtype == torch.int8:
            scale = scales.get(k)
            if not isinstance(scale, float) or not math.isfinite(scale):
                raise ValueError(f"{what}: {k} is int8 without a finite scale")
            out[k] = v.float() * scales[k]
        else:
            out[k] = v.float()
    return out


def advance_view(view: Params, shared: Params, compression: str) -> tuple[dict, Params]:
    """The packed delta to send (`shared - view`) and the view once receivers add it."""
    delta = pack({k: shared[k] - view[k] for k in view}, compression)
    return delta, apply_delta(view, unpack(delta, view, "delta"))


def with_feedback(grad: Params, residual: Params, compression: str) -> tuple[dict, Params]:
    """Error feedback: pack `grad + residual`; the new residual is what packing lost."""
    total = {k: g + residual[k] for k, g in grad.items()} if residual else grad
    packed = pack(total, compression)
    sent = unpack(packed, total, "pseudo-gradient")
    return packed, {k: total[k] - sent[k] for k in total}


def digest(params: Params) -> str:
    """SHA-256 of the tensors' names and fp32 bytes (learners skip a download they hold)."""
    h = hashlib.sha256()
    for k, v in params.items():
        h.update(k.encode())
        h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def apply_delta(base: Params, delta: Params) -> Params:
    return {k: base[k] + delta[k].float() for k in base}


def merge(rule: str, local_now: Params, snapshot: Params, new_base: Params) -> Params:
    """A learner's weights once the shared update arrives.

    `snapshot` is the local weights it sent at the sync point, `local_now` its weights now
    (different only in decoupled mode, after steps taken while the round was in flight).
    `replace`: the new shared weights (the steps in flight are dropped). `delta` (default):
    the new shared weights plus the progress made since the snapshot, so no inner step is
    lost; with no steps in flight both rules give the shared weights."""
    if rule == "replace":
        return {k: v.clone() for k, v in new_base.items()}
    if rule == "delta":
        return {k: new_base[k] + (local_now[k].float() - snapshot[k]) for k in new_base}
    raise ValueError(f"merge rule {rule!r} (expected one of {MERGE_RULES})")


def partition(sizes: list[tuple[str, int]], parts: int) -> list[list[str]]:
    """Names (in order) in `parts` contiguous groups of about equal total size, none empty."""
    if not 1 <= parts <= len(sizes):
        raise ValueError(f"{parts} fragments of {len(sizes)} tensors")
    total = sum(n for _, n in sizes)
    groups: list[list[str]] = [[] for _ in range(parts)]
    g, done = 0, 0
    for i, (name, size) in enumerate(sizes):
        full = done >= total * (g + 1) / parts
        needed = len(sizes) - i <= parts - g - 1  # the later groups need these tensors
        if groups[g] and g < parts - 1 and (full or needed):
            g += 1
        groups[g].append(name)
        done += size
    return groups


def round_closes(
    expected: Iterable[str],
    received: Iterable[str],
    waited_s: float,
    timeout_s: float,
    min_learners: int = 1,
) -> bool:
    """Whether a round merges now: every expected learner sent its pseudo-gradient, or the
    round has waited `timeout_s` since its first one; never with fewer than `min_learners`."""
    got = set(received)
    if len(got) < max(1, min_learners):
        return False
    return set(expected) <= got or waited_s >= timeout_s


def check_like(params: dict, reference: Params, what: str) -> None:
    """Raise ValueError unless `params` has exactly the names and shapes of `reference`."""
    if list(params) != list(reference):
        missing, extra = set(reference) - set(params), set(params) - set(reference)
        raise ValueError(
            f"{what}: names differ (missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]})"
        )
    for k, v in params.items():
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(reference[k].shape):
            raise ValueError(
                f"{what}: {k} has shape {getattr(v, 'shape', None)}, expected "
                f"{tuple(reference[k].shape)}"
            )
        if not v.dtype.is_floating_point and v.dtype != torch.int8:
            raise ValueError(f"{what}: {k} is {v.dtype}, not floating point")


@dataclass
class OuterConfig:
    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True
    round_timeout_s: float = 60.0
    min_learners: int = 1
    compression: str = "bf16"
    expect: tuple[str, ...] = ()
    """Learners waited for (up to the round timeout) in the first round after a start."""
    max_update: float = MAX_UPDATE
    """A pushed pseudo-gradient with an element of larger magnitude is refused."""
