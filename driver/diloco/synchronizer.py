"""The DiLoCo synchronizer: merges the learners' pseudo-gradients into the shared weights.

    python -m driver.diloco.synchronizer --bind tcp://*:5555 --keys KEYS --state DIR \
        [--outer-lr 0.7 --outer-momentum 0.9 --no-nesterov --round-timeout 60 \
         --min-learners 1 --compression bf16 --rounds N]

Requests it serves (`driver.messaging.wire` messages from `link.Client`):
- `join {learner, digest}`: the round and the shared weights (`kind: full`), or only the
  round when the weights the learner holds as shared (its own at a first join, its round's
  when it resumes from its checkpoint) have the shared weights' digest (`kind: same`),
  or `kind: empty` before the first learner's `init`;
- `init {learner, weights}`: the first learner's weights become the shared weights;
- `push {learner, round, grad}`: a pseudo-gradient against round `round`'s weights. When
  every expected learner has pushed, or `--round-timeout` after the first push, the round
  merges: the mean pseudo-gradient of those present takes one outer step, the state is saved
  (`state.py`), and each contributor gets the change of the shared weights (`kind: delta`,
  in `--compression`). A push against another round (a late or returning learner) gets the
  shared weights whole (`kind: full`) to continue from.

The first round after a start waits for the `--expect` learners (and any that joined); a
learner that misses a round is no longer waited for until it pushes again. The state is
saved before the replies go out, so a restarted synchronizer resumes at the last merged
round; pushes in flight when it stopped are sent again by the learners.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from dataclasses import dataclass

from driver.diloco import outer
from driver.diloco.fragment import Fragment
from driver.diloco.link import MAX_BYTES, Server
from driver.messaging import wire

log = logging.getLogger("driver.diloco.synchronizer")
MAX_FRAGMENTS = 64


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


class Synchronizer:
    """The merge loop over one `link.Server`: routes each request to its fragment's state
    (fragment 0 in `state_dir`, fragment f in `state_dir/fragment-f`, made on first use);
    `serve()` until `rounds` merges (of any fragment) or `stop()`."""

    def __init__(self, server: Server, state_dir: str, cfg: OuterConfig):
        self.server, self.state_dir, self.cfg = server, state_dir, cfg
        self.fragments = {0: Fragment(server, state_dir, cfg)}
        self.merges = 0
        self.stopped = False

    @property
    def round(self) -> int:
        return self.fragments[0].round

    def fragment(self, index: int) -> Fragment:
        if index not in self.fragments:
            folder = f"{self.state_dir}/fragment-{index}"
            self.fragments[index] = Fragment(self.server, folder, self.cfg, index)
        return self.fragments[index]

    def serve(self, rounds: int = 0) -> None:
        while not self.stopped and not (rounds and self.merges >= rounds):
            got = self.server.recv(0.05)
            if got:
                self.handle(*got)
            for fragment in list(self.fragments.values()):
                if fragment.due():
                    fragment.merge()
                    self.merges += 1

    def stop(self) -> None:
        self.stopped = True

    def handle(self, peer: bytes, msg: wire.Message) -> None:
        try:
            if msg.kind != "req" or msg.method not in ("join", "init", "push"):
                raise ValueError(f"unexpected {msg.kind} {msg.method!r}")
            body = wire.decode(msg.body, torch=True)
            if not isinstance(body, dict) or not isinstance(body.get("learner"), str):
                raise ValueError("body lacks a learner name")
            index = body.get("fragment", 0)
            if type(index) is not int or not 0 <= index < MAX_FRAGMENTS:
                raise ValueError(f"fragment {index!r} is not 0..{MAX_FRAGMENTS - 1}")
            self.fragment(index).handle(peer, msg, body)
        except (ValueError, TypeError, KeyError, wire.WireError) as err:
            log.warning("refused %s from %r: %s", msg.method, peer, err)
            self.server.error(peer, msg.id, "protocol", str(err))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m driver.diloco.synchronizer", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--bind", default="tcp://*:5555", help="ZeroMQ endpoint to bind")
    p.add_argument("--keys", required=True, help="keys folder (driver.diloco.keys), or `env`")
    p.add_argument("--state", required=True, help="folder or URI of the state and rounds.jsonl")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--no-nesterov", action="store_true", help="plain momentum SGD")
    p.add_argument("--round-timeout", type=float, default=60.0, help="seconds after the first push")
    p.add_argument("--min-learners", type=int, default=1)
    p.add_argument(
        "--expect", default="", help="learners (comma-separated) the first round waits for"
    )
    p.add_argument("--compression", choices=sorted(outer.COMPRESSIONS), default="bf16")
    p.add_argument("--rounds", type=int, default=0, help="exit after this many merges (0: never)")
    p.add_argument("--endpoint-file", help="write the bound endpoint here (port 0 binds)")
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    return p.parse_args(argv)


def outer_config(args: argparse.Namespace) -> OuterConfig:
    """The merge settings from the command line (parse_args)."""
    return OuterConfig(
        args.outer_lr,
        args.outer_momentum,
        not args.no_nesterov,
        args.round_timeout,
        args.min_learners,
        args.compression,
        tuple(n for n in args.expect.split(",") if n),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not 0 < args.outer_lr or not 0 <= args.outer_momentum < 1 or args.round_timeout <= 0:
        print("error: --outer-lr > 0, 0 <= --outer-momentum < 1, --round-timeout > 0")
        return 2
    cfg = outer_config(args)
    try:
        server = Server(args.bind, args.keys, args.max_bytes)
        sync = Synchronizer(server, args.state, cfg)
    except (OSError, ValueError) as err:
        print(f"error: {err}")
        return 2
    if args.endpoint_file:
        with open(args.endpoint_file + ".tmp", "w") as out:
            out.write(server.address)
        os.replace(args.endpoint_file + ".tmp", args.endpoint_file)
    signal.signal(signal.SIGTERM, lambda *_: sync.stop())  # a pod's stop: leave cleanly
    log.info("listening on %s, round %d", server.address, sync.round)
    try:
        sync.serve(args.rounds)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
