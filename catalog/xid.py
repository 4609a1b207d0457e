"""NVIDIA's Xid catalog, as far as the platform acts on it: what each GPU driver error
means, which kind of fault it is, and NVIDIA's resolution bucket (the immediate action the
Xid catalog names: restart the application, reset the GPU, reboot the node, ...).

One table, read by the node checks (`runner.preflight.kernel`: severity and category of a
kernel log line) and by the failure analysis (`runner.diagnose`: a node fault sends the
node to Warden and the relaunch avoids it; an application-level Xid only restarts).
Meanings and buckets follow NVIDIA's "Xid Errors" catalog and its GPU memory error
management guide; codes not listed are unknown to the platform (a warning, no action).

    from catalog.xid import XIDS, node_fault
    XIDS[79].bucket            # "RESTART_BM"
    node_fault(79), node_fault(13)   # True, False
"""

from __future__ import annotations

from dataclasses import dataclass

# NVIDIA's resolution buckets (the catalog's "immediate action" column).
RESTART_APP = "RESTART_APP"  # the application's process; the GPU is fine
RESET_GPU = "RESET_GPU"  # a GPU reset (drain the node's work first)
RESTART_BM = "RESTART_BM"  # reboot the node (bare metal / VM)
CONTACT_SUPPORT = "CONTACT_SUPPORT"
IGNORE = "IGNORE"  # informational
NODE_BUCKETS = frozenset({RESET_GPU, RESTART_BM, CONTACT_SUPPORT})
"""Buckets whose fault stays with the node until someone acts: the node is at fault."""


@dataclass(frozen=True)
class Xid:
    meaning: str
    kind: str
    """preflight category: `xid`, `xid-ecc`, `xid-row-remap`, `nvlink`"""
    fatal: bool
    """the node check fails on it (else a warning)"""
    bucket: str
    """NVIDIA's resolution bucket (immediate action)"""


XIDS: dict[int, Xid] = {
    13: Xid("graphics engine exception", "xid", False, RESTART_APP),
    31: Xid("GPU memory page fault", "xid", False, RESTART_APP),
    43: Xid("GPU stopped processing", "xid", False, RESTART_APP),
    45: Xid("preemptive cleanup", "xid", False, IGNORE),
    48: Xid("double-bit ECC error (DBE)", "xid-ecc", True, RESET_GPU),
    61: Xid("internal micro-controller breakpoint", "xid", True, RESET_GPU),
    62: Xid("internal micro-controller halt", "xid", True, RESET_GPU),
    63: Xid("row remapping pending, GPU reset needed", "xid-row-remap", False, RESET_GPU),
    64: Xid("row remapping failure", "xid-row-remap", True, RESET_GPU),
    74: Xid("NVLink error", "nvlink", True, RESET_GPU),
    79: Xid("GPU has fallen off the bus", "xid", True, RESTART_BM),
    92: Xid("high single-bit ECC error rate", "xid-ecc", False, IGNORE),
    94: Xid("contained ECC error", "xid-ecc", False, RESTART_APP),
    95: Xid("uncontained ECC error", "xid-ecc", True, RESET_GPU),
    119: Xid("GSP RPC timeout", "xid", True, RESET_GPU),
    120: Xid("GSP error", "xid", True, RESET_GPU),
    140: Xid("unrecovered ECC error", "xid-ecc", True, RESET_GPU),
    154: Xid("GPU recovery action: reset or reboot required", "xid", True, RESET_GPU),
}


def node_fault(code: int) -> bool:
    """Whether Xid `code` leaves the node faulty until it is reset, rebooted or repaired."""
    xid = XIDS.get(code)
    return xid is not None and xid.bucket in NODE_BUCKETS
