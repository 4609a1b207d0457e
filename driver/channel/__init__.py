"""The run's channel between the driver and its training workers, over ZeroMQ (no Ray actor).

The driver serves the run's `RunChannel` state (state.py: metrics rows, failure
records, attempt counts, preemption notices, the final figures) from a ROUTER socket in a
thread of its own process (server.py); each training worker connects a DEALER (client.py)
with the address and the run's token that the driver hands it in the loop's arguments.

    channel = start_channel()                               # driver: bind, serve
    # (= DriverChannel.start(RunChannel(), host); stops.py relays SIGTERM/SIGINT to it)
    spec = channel.address                                  # -> the workers' arguments
    client = spec.connect(rank)                             # worker
    attempt = client.call("hello", rank, host, ray_node, timeout_s=60)
    client.send("push_many", rows)                          # no reply
    rows = channel.drain()                                  # driver: under the state's lock
    drains = watch_drains(channel)                          # driver: drain.py, a draining
                                                            # node's ranks told they end
    client.call("persist", timeout_s=30)                    # worker: rows written? (before a
                                                            # checkpoint commits)

Messages are the auxiliary transport's (driver.messaging.wire): a packed envelope and a JSON
body, never pickle. A worker connects with the run's token as its ZMTP PLAIN password,
checked at the handshake (a stranger sends nothing), and every request carries it again in
the envelope's info; the server drops a message with a wrong token, one that does not
parse or one over `MAX_BYTES` in all, and answers only the methods in `WORKER_METHODS`.
A local run binds the loopback address; a cluster run its pod's IP, which the team
namespace's NetworkPolicy opens to that namespace's pods only.
"""

from driver.channel.client import ChannelAddress, ChannelClient, ChannelError
from driver.channel.server import WORKER_METHODS, DriverChannel, start_channel
from driver.channel.state import RunChannel

__all__ = [
    "WORKER_METHODS",
    "ChannelAddress",
    "ChannelClient",
    "ChannelError",
    "DriverChannel",
    "RunChannel",
    "start_channel",
]
