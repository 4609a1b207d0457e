"""The deterministic rules: each reads the Evidence and says what it finds, with the lines.

Every rule returns `Finding`s (a category, a decision, the culprits, the evidence lines, a
confidence, a proposed change) and `decide` keeps the one with the highest priority: the
root cause before its consequences (a GPU that fell off the bus makes NCCL time out and
every rank fail; an OOM kill looks like a killed process). A rank's failures are taken in
time order: the first one is the cause, later ones followed from it.

| rule | category | decision |
| --- | --- | --- |
| an Xid of a node bucket (catalog/xid.py), NVLink, Warden's fault | hardware | restart_excluding |
| CUDA out of memory, the kernel's OOM killer on a rank | oom | fix_config |
| a full disk; storage refusing (403) | storage | stop |
| storage busy (429, 503) | storage | restart |
| non-finite loss in the metrics | numerics | fix_config |
| `debug.fail_at_step`, a config the driver refused | config | fix_config |
| a traceback through the user's code | user_code | fix_code |
| ranks out of step (flight recorder mismatch) | user_code | fix_code |
| a collective timeout; the flight recorder's ranks behind | hang | restart_excluding, restart |
| NCCL and transport errors | network | restart_excluding, restart |
| a preemption notice (SIGTERM), spot reclaim | preemption | restart |
| a process killed, a service worker dead, ft below its minimum | killed | restart |
| a traceback in the platform's own code only | platform | stop |
| a finished run with a finite loss | - | no_failure |
| the exit code alone: 2, 3 (ft), 137, 143 | config, killed, preemption | fix_config, restart |
"""

from __future__ import annotations

from runner.diagnose.finding import CATEGORIES, DECISIONS, PRIORITY, Finding, lookup
from runner.diagnose.rules_code import code, exit_codes, network, no_failure
from runner.diagnose.rules_node import hardware, oom, storage
from runner.diagnose.rules_run import config, hang, killed, numerics, preemption

__all__ = ["CATEGORIES", "DECISIONS", "PRIORITY", "RULES", "Finding", "lookup"]

RULES = (hardware, oom, storage, numerics, config, code, killed, hang, network, preemption,
         no_failure, exit_codes)  # fmt: skip
