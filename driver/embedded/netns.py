"""An embedded run's own network namespace: nothing it listens on is reachable from outside.

Ray 2.60's servers (GCS, raylet, object manager, workers, agents) bind the wildcard
address, and `ray.init` turns a loopback `_node_ip_address` back into the machine's IP, so
an embedded Ray listens on every interface of the machine. A local run (`runner run --local`,
`python -m driver.train`) goes instead in a network namespace of its own (Linux), made
just before its Ray starts (driver/embedded/supervise.py, `supervise`): its only interface is
loopback, carrying the address Ray picks for the machine (so Ray and gloo find it) and a
route through it to the one address Ray's address lookup "connects" a UDP socket to (no
packet is sent), so that lookup needs no outside network. There is no default route: a DNS
query (e.g. a reverse lookup of the machine's address) fails at once instead of waiting
seconds for a server it cannot reach. Every Ray process of the run listens there; the
machine's interfaces carry none of them.

`isolate()` makes the namespace: as root `unshare(CLONE_NEWNET)`, otherwise inside a new
user namespace too (the user is root there, and only there); then `ip` (iproute2) sets up
loopback. When that cannot be done, the run keeps the host's network, with one warning.

A run that needs the network keeps the host's (`network_reason`): one whose config names a
network location (`scheme://` other than file, memory, ipc: a ClickHouse or OTLP endpoint,
a bucket for checkpoints or data), one with Ray's dashboard (`run.local_dashboard`, opened
from a browser), a DiLoCo learner (`diloco.address`: it reaches its synchronizer), or
`REVE_LOCAL_NETWORK=host`. The run reads and writes only files (its output folder, which
`runner ui` reads), so nothing else needs the network.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess

NETWORK_ENV = "REVE_LOCAL_NETWORK"
"""`host` keeps a local run on the host's network; anything else (default) isolates it."""
LOCAL_SCHEMES = ("file", "memory", "ipc")
"""URL schemes that stay on this machine."""
PROBE = "8.8.8.8"
"""Where Ray 2.60 (and `machine_address`) "connects" a UDP socket to learn the machine's
address."""
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def network_reason(config: dict, environ: dict[str, str]) -> str | None:
    """Why a run keeps the host's network (None: it can run isolated). `config`: the
    composed config as plain data."""
    if environ.get(NETWORK_ENV) == "host":
        return f"{NETWORK_ENV}=host"
    if (config.get("diloco") or {}).get("address"):
        return "a DiLoCo learner reaches its synchronizer (diloco.address)"
    if (config.get("run") or {}).get("local_dashboard"):
        return "run.local_dashboard is on"
    for key, value in _strings(config):
        scheme = value.split("://", 1)[0] if "://" in value else None
        if scheme and scheme.isidentifier() and scheme not in LOCAL_SCHEMES:
            return f"{key} names {scheme}://"
    return None


def _strings(node, prefix: str = ""):
    """(dotted key, value) of every string in a config."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, f"{prefix}{index}.")
    elif isinstance(node, str):
        yield prefix.rstrip("."), node


def machine_address() -> str:
    """The IPv4 address Ray picks for this machine: the source address of a route to the
    outside (no packet is sent), else the host name's address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((PROBE, 53))
            return probe.getsockname()[0]
    except OSError:
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"


def loopback_commands(address: str) -> list[list[str]]:
    """`ip` commands that set up the namespace's loopback for `address`."""
    commands = [["ip", "link", "set", "lo", "up"]]
    if not address.startswith("127."):
        commands.append(["ip", "addr", "add", f"{address}/32", "dev", "lo"])
    commands.append(["ip", "route", "add", f"{PROBE}/32", "dev", "lo", "src", address])
    return commands


def isolate() -> str | None:
    """Move this process (single-threaded, before it starts Ray) into a new network
    namespace with only loopback up; None when done, else why not (this process then
    stays on the host's network, unchanged). Raises OSError when the namespace was made
    but loopback could not be set up (the process cannot go back)."""
    if not shutil.which("ip"):
        return "no `ip` command (iproute2) to set up its loopback"
    address = machine_address()
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET) != 0:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            return f"namespaces are not available here ({os.strerror(ctypes.get_errno())})"
        _map_root(uid, gid)
    for command in loopback_commands(address):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            raise OSError(f"{' '.join(command)}: {done.stderr.strip()}")
    return None


def _map_root(uid: int, gid: int) -> None:
    """In a new user namespace: this user is root there (so `ip` keeps its capabilities),
    and only there."""
    with open("/proc/self/setgroups", "w") as out:
        out.write("deny")
    with open("/proc/self/uid_map", "w") as out:
        out.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as out:
        out.write(f"0 {gid} 1")
