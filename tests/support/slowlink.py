"""A slow cross-region link on one machine: network namespaces joined by veth, `tc tbf`.

    with SlowLink(["sync", "a", "b"], rate="20mbit") as link:
        proc = subprocess.Popen(link.wrap("a", ["python", ...]))   # runs inside namespace a
        link.address("sync")                                        # 10.<x>.1.2 (its IP)
        link.sent_bytes()                                           # bytes all ends sent

Every end gets its own namespace with one interface `up0` and a veth to a hub namespace
that routes between them; each veth is limited to `rate` in both directions by a token
bucket. Every byte between two ends crosses two limited links (end -> hub -> end). This
kernel has no netem, so there is no added delay: the link is slow, not far. Names are
random per link (`dl<hex>...`), addresses live only inside the namespaces created, and
`close()` deletes them all. Needs root (`reason_unavailable()` says why not).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess

IFACE = "up0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def reason_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if not shutil.which("ip") or not shutil.which("tc"):
        return "iproute2 (ip, tc) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"dl{secrets.token_hex(4)}p"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class SlowLink:
    """Namespaces for `ends`, each joined to a routing hub by a rate-limited veth."""

    def __init__(self, ends: list[str], rate: str = "20mbit", burst: str = "64kb"):
        self.prefix = f"dl{secrets.token_hex(3)}"
        self.hub = f"{self.prefix}h"
        self.ends = {name: (f"{self.prefix}e{i}", i + 1) for i, name in enumerate(ends)}
        self.rate, self.burst = rate, burst
        self.made: list[str] = []
        self.subnet = 10 + secrets.randbelow(200)

    def __enter__(self) -> SlowLink:
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        self._netns(self.hub)
        _ip("netns", "exec", self.hub, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for ns, i in self.ends.values():
            self._netns(ns)
            hub_side, end_side = f"{self.prefix}h{i}", f"{self.prefix}x{i}"
            _ip("link", "add", hub_side, "type", "veth", "peer", "name", end_side)
            _ip("link", "set", hub_side, "netns", self.hub)
            _ip("link", "set", end_side, "netns", ns)
            _ip("-n", ns, "link", "set", end_side, "name", IFACE)
            _ip("-n", self.hub, "addr", "add", f"10.{self.subnet}.{i}.1/24", "dev", hub_side)
            _ip("-n", ns, "addr", "add", f"10.{self.subnet}.{i}.2/24", "dev", IFACE)
            _ip("-n", self.hub, "link", "set", hub_side, "up")
            _ip("-n", ns, "link", "set", IFACE, "up")
            _ip("-n", ns, "route", "add", "default", "via", f"10.{self.subnet}.{i}.1")
            for where, dev in ((self.hub, hub_side), (ns, IFACE)):
                subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        where,
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        self.rate,
                        "burst",
                        self.burst,
                        "latency",
                        "200ms",
                    ],
                    check=True,
                    capture_output=True,
                )

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def address(self, end: str) -> str:
        """The IP address of an end (inside its namespace)."""
        return f"10.{self.subnet}.{self.ends[end][1]}.2"

    def wrap(self, end: str, cmd: list[str]) -> list[str]:
        """`cmd` to run inside an end's namespace."""
        return ["ip", "netns", "exec", self.ends[end][0], *cmd]

    def sent_bytes(self) -> int:
        """Bytes every end has sent so far (IP packets, headers included)."""
        out = _ip("-n", self.hub, "-j", "-s", "link", "show").stdout
        return sum(
            link["stats64"]["rx"]["bytes"]
            for link in json.loads(out)
            if link["ifname"].startswith(self.prefix)
        )

    def close(self) -> None:
        for name in reversed(self.made):
            _ip("netns", "del", name, check=False)
        self.made = []
