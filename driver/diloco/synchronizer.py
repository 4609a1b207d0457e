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

No message ends it, even from a learner on the allow-list: a request that does not parse
(JSON nesting is bounded before parsing), names another learner than the one its Curve key
belongs to (`link.Server.learner`), or carries an update with a NaN, an infinity or a value
over `--max-update` is answered with an error and counted against the learner
(`stats()`, and the next round's record); a merge that comes out non-finite is dropped
(fragment.py); and should the loop fail anyway it is logged and run again
(`stats()["restarts"]`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal

from driver.diloco import outer
from driver.diloco.fragment import Fragment
from driver.diloco.link import MAX_BYTES, Server
from driver.diloco.outer import OuterConfig
from driver.messaging import wire
from driver.messaging.limits import Ledger
from driver.messaging.serving import supervise

log = logging.getLogger("driver.diloco.synchronizer")
MAX_FRAGMENTS = 64


class Synchronizer:
    """The merge loop over one `link.Server`: routes each request to its fragment's state
    (fragment 0 in `state_dir`, fragment f in `state_dir/fragment-f`, made on first use);
    `serve()` until `rounds` merges (of any fragment) or `stop()`."""

    def __init__(self, server: Server, state_dir: str, cfg: OuterConfig):
        self.server, self.state_dir, self.cfg = server, state_dir, cfg
        self.fragments = {0: Fragment(server, state_dir, cfg)}
        self.merges = 0
        self.stopped = False
        self.ledger = Ledger()  # refusals per reason and per learner (or peer)
        self.restarts = 0
        self.rounds = 0

    @property
    def round(self) -> int:
        return self.fragments[0].round

    def fragment(self, index: int) -> Fragment:
        if index not in self.fragments:
            folder = f"{self.state_dir}/fragment-{index}"
            self.fragments[index] = Fragment(self.server, folder, self.cfg, index)
        return self.fragments[index]

    def serve(self, rounds: int = 0) -> None:
        """Serve until `rounds` merges (0: until `stop()`); the loop is run again if it fails."""
        self.rounds = rounds
        supervise(self._loop, self._serving, self._restarted, "diloco synchronizer")

    def _serving(self) -> bool:
        return not self.stopped and not (self.rounds and self.merges >= self.rounds)

    def _restarted(self, err: BaseException) -> None:
        self.restarts += 1

    def _loop(self) -> None:
        while self._serving():
            got = self.server.recv(0.05)
            if got:
                self.handle(*got)
            for fragment in list(self.fragments.values()):
                if fragment.due():
                    fragment.merge()
                    self.merges += 1

    def stop(self) -> None:
        self.stopped = True

    def stats(self) -> dict:
        """Refusals per reason and per learner, loop restarts, merges, the link's refused keys."""
        return {
            **self.ledger.stats(),
            "restarts": self.restarts,
            "merges": self.merges,
            "refused_keys": self.server.allowlist.stats(),
        }

    def handle(self, peer: bytes, msg: wire.Message) -> None:
        """Serve one request; anything wrong with it is answered, counted and logged."""
        who: str | bytes = self.server.learner(peer) or peer
        try:
            if msg.kind != "req" or msg.method not in ("join", "init", "push"):
                raise ValueError(f"unexpected {msg.kind} {msg.method!r}")
            body = wire.decode(msg.body, torch=True)
            if not isinstance(body, dict) or not isinstance(body.get("learner"), str):
                raise ValueError("body lacks a learner name")
            if body["learner"] != who:
                raise outer.Refused("key", f"learner {body['learner']!r} with the key of {who!r}")
            index = body.get("fragment", 0)
            if type(index) is not int or not 0 <= index < MAX_FRAGMENTS:
                raise ValueError(f"fragment {index!r} is not 0..{MAX_FRAGMENTS - 1}")
            self.fragment(index).handle(peer, msg, body)
        except Exception as err:  # noqa: BLE001 (whatever a learner sends is a refusal)
            reason = getattr(err, "reason", "protocol")
            self.ledger.refuse(who, reason)
            count = self.ledger.reasons[reason]
            if count <= 100 or count % 1000 == 0:
                log.warning("refused %s from %r (%s): %s", msg.method, who, reason, err)
            code = "refused" if isinstance(err, outer.Refused) else "protocol"
            self.server.error(peer, msg.id, code, f"{type(err).__name__}: {err}"[:2000])


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
    p.add_argument(
        "--max-update",
        type=float,
        default=outer.MAX_UPDATE,
        help="refuse a pseudo-gradient with an element of larger magnitude",
    )
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
        args.max_update,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not 0 < args.outer_lr or not 0 <= args.outer_momentum < 1 or args.round_timeout <= 0:
        print("error: --outer-lr > 0, 0 <= --outer-momentum < 1, --round-timeout > 0")
        return 2
    if not 0 < args.max_update < float("inf"):
        print(f"error: --max-update {args.max_update}: a finite number > 0")
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
