"""Kernel log parsers on recorded dmesg and journal output."""

from __future__ import annotations

import pytest

from runner.preflight import kernel
from runner.preflight.rows import FAIL, PASS, WARN
from tests.preflight.conftest import fixture_text


@pytest.mark.parametrize(
    ("line", "category", "severity", "code", "device"),
    [
        (
            "[10455.120019] NVRM: Xid (PCI:0000:b3:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            "xid",
            FAIL,
            79,
            "0000:b3:00",
        ),
        (
            "[ 8812.310072] NVRM: Xid (PCI:0000:87:00): 48, pid=71233, name=pt_main_thread, Ch "
            "00000008, An uncorrectable double bit error (DBE) has been detected",
            "xid-ecc",
            FAIL,
            48,
            "0000:87:00",
        ),
        (
            "[ 8812.310980] NVRM: Xid (PCI:0000:87:00): 94, pid=71233, name=pt_main_thread, "
            "Contained: SM (0x1). RST: No, D-RST: No",
            "xid-ecc",
            WARN,
            94,
            "0000:87:00",
        ),
        (
            "Nov 30 10:52:11 host kernel: NVRM: Xid (PCI:0000:9b:00): 95, pid='<unknown>', "
            "name=<unknown>, Uncontained: FBHUB. RST: Yes, D-RST: No",
            "xid-ecc",
            FAIL,
            95,
            "0000:9b:00",
        ),
        (
            "NVRM: Xid (PCI:0000:18:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: "
            "New row (0x00000000001fffa0) marked for remapping, reset gpu to activate.",
            "xid-row-remap",
            WARN,
            63,
            "0000:18:00",
        ),
        (
            "NVRM: Xid (PCI:0000:9b:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: "
            "(0x0000000000bfc028) - All reserved rows for bank are remapped",
            "xid-row-remap",
            FAIL,
            64,
            "0000:9b:00",
        ),
        (
            "NVRM: Xid (PCI:0000:c8:00): 74, pid=71240, name=pt_main_thread, NVLink: fatal error "
            "detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            "nvlink",
            FAIL,
            74,
            "0000:c8:00",
        ),
        (
            "NVRM: Xid (PCI:0000:c8:00): 13, pid=1, name=python, Graphics SM Warp Exception",
            "xid",
            WARN,
            13,
            "0000:c8:00",
        ),
        (  # drivers before 470 print no name=
            "[ 1433.262518] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
            "xid",
            FAIL,
            79,
            "0000:3b:00",
        ),
        (  # dmesg -T
            "[Mon Nov 30 10:52:11 2026] NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action "
            "changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            "xid",
            FAIL,
            154,
            "0000:9b:00",
        ),
        (  # journalctl -k -o short-iso
            "2026-11-30T10:52:11+0000 gke-h200-1 kernel: NVRM: Xid (PCI:0000:9b:00): 140, "
            "pid='<unknown>', name=<unknown>, An uncorrectable ECC error detected (possible "
            "firmware handling failure) DRAM:-1840691462, LTC:0, MMU:0, PCIE:0",
            "xid-ecc",
            FAIL,
            140,
            "0000:9b:00",
        ),
        (
            "NVRM: Xid (PCI:0000:c8:00): 999, pid=1, name=python, something new",
            "xid",
            WARN,
            999,
            "0000:c8:00",
        ),
        (
            "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
            "sxid",
            FAIL,
            20034,
            "0000:86:00.0",
        ),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress "
            "non-posted PRIV error (First)",
            "sxid",
            WARN,
            12028,
            "0000:05:00.0",
        ),
        (
            "pcieport 0000:00:03.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
            "(Receiver ID)",
            "pcie-aer",
            WARN,
            None,
            "0000:00:03.1",
        ),
        (
            "nvidia 0000:81:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
            "(Unregistered Agent ID)",
            "pcie-aer",
            FAIL,
            None,
            "0000:81:00.0",
        ),
        (
            "Memory cgroup out of memory: Killed process 80112 (python3) total-vm:182374120kB",
            "oom",
            WARN,
            None,
            "python3 pid 80112",
        ),
        (
            "Out of memory: Killed process 22311 (ray::IDLE) total-vm:10383820kB",
            "oom",
            WARN,
            None,
            "ray::IDLE pid 22311",
        ),
        (
            "INFO: task pt_main_thread:71233 blocked for more than 122 seconds.",
            "hung-task",
            WARN,
            None,
            "pt_main_thread pid 71233",
        ),
    ],
)
def test_parse_line(line, category, severity, code, device):
    found = kernel.parse_line(line)
    assert (found.category, found.severity, found.code, found.device) == (
        category,
        severity,
        code,
        device,
    )


@pytest.mark.parametrize(
    "line",
    [
        "[    7.631266] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32",
        "pcieport 0000:00:03.1: AER: Corrected error received: 0000:00:03.1",
        '[ 9120.551944] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
        "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-997",
        "",
    ],
)
def test_lines_that_are_not_findings(line):
    assert kernel.parse_line(line) is None


def _results(text: str) -> dict[str, str]:
    return {row.check: row.result for row in kernel.rows(kernel.parse(text))}


def test_dmesg_with_faults():
    results = _results(fixture_text("kernel", "dmesg-h100-faults.txt"))
    assert results == {
        "xid": FAIL,
        "xid-ecc": FAIL,
        "xid-row-remap": WARN,
        "nvlink": FAIL,
        "sxid": PASS,
        "pcie-aer": WARN,
        "oom": WARN,
        "hung-task": WARN,
    }


def test_journal_with_nvswitch_faults():
    results = _results(fixture_text("kernel", "journal-h200-sxid.txt"))
    assert results == {
        "xid": PASS,
        "xid-ecc": FAIL,
        "xid-row-remap": FAIL,
        "nvlink": PASS,
        "sxid": FAIL,
        "pcie-aer": FAIL,
        "oom": WARN,
        "hung-task": PASS,
    }


def test_clean_log_passes_every_category():
    rows = kernel.check(fixture_text("kernel", "dmesg-clean.txt"))
    assert [r.check for r in rows] == kernel.CATEGORIES
    assert {r.result for r in rows} == {PASS}


def test_detail_names_worst_finding_and_count():
    rows = {
        r.check: r
        for r in kernel.rows(kernel.parse(fixture_text("kernel", "dmesg-h100-faults.txt")))
    }
    assert rows["xid-ecc"].detail.startswith("Xid 48: double-bit ECC error (DBE) on 0000:87:00")
    assert rows["xid-ecc"].detail.endswith("(+1 more)")
    assert "0000:b3:00" in rows["xid"].detail


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("NVRM: Xid (PCI:0000:c8:00): 999, pid=1, name=python, something new", "something new"),
        ("NVRM: Xid (PCI:0000:3b:00): 32, pid=2123, Channel ID 00000010", "Channel ID 00000010"),
        ("NVRM: Xid (PCI:0000:3b:00): 109, pid=9, name=py, Ch 00000008, CTX", "CTX"),
        ("NVRM: Xid (PCI:0000:b3:00): 79, pid=0, fell off.", "GPU has fallen off the bus"),
    ],
)
def test_message_names_code_and_meaning(line, message):
    code = line.split("): ")[1].split(",")[0]
    assert kernel.parse_line(line).message == f"Xid {code}: {message}"


def test_unreadable_log_skips(monkeypatch):
    monkeypatch.setattr(kernel, "read_log", lambda: (None, "dmesg: Operation not permitted"))
    rows = kernel.check()
    assert {r.result for r in rows} == {"SKIP"}
    assert "Operation not permitted" in rows[0].detail
