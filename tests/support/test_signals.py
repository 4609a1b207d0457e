"""The signal masks a failing signal test prints."""

from __future__ import annotations

import os

import pytest

from tests.support.signals import describe_tree, masks, signal_summary

STATUS = "Name:\tpython\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"


@pytest.mark.parametrize(
    ("blk", "ign", "cgt", "summary"),
    [
        ("0", "0", "0", "INT: default, TERM: default"),
        ("0", "2", "0", "INT: SigIgn, TERM: default"),
        ("2", "0", "4002", "INT: SigBlk+SigCgt, TERM: SigCgt"),
        ("4000", "0", "0", "INT: default, TERM: SigBlk"),
    ],
)
def test_summary_names_the_masks_holding_each_signal(blk, ign, cgt, summary):
    status = STATUS + f"SigBlk:\t{blk}\nSigIgn:\t{ign}\nSigCgt:\t{cgt}\n"
    assert signal_summary(masks(status)) == summary


def test_the_tree_starts_with_its_root():
    first = describe_tree(os.getpid()).splitlines()[0]
    assert first.startswith(f"{os.getpid()} (parent {os.getppid()}) state R")
    assert "INT: SigCgt" in first  # Python's own KeyboardInterrupt handler
