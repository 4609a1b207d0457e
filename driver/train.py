"""Entry point of the training driver:
`python -m driver.train CONFIG.yaml [key=value ...] [--show-config]`.

Composes the config (driver/conf groups + the YAML + overrides), saves it as
`<run.output_dir>/config.yaml` and says where (`--show-config` prints it; in a cluster it
is one JSON line), then runs training on Ray (embedded locally, `address=auto` in a
cluster) and ends with a summary. A cluster run needs its checkpoint key
(REVE_CHECKPOINT_KEY) and is refused without it. Before Ray starts, the run's storage must
take a small write within `checkpoint.storage_timeout_s` (one line naming the URI and the
reason otherwise). Exit codes: 0 done, 1 the run failed (a crash bundle was written; or an
auxiliary service failed its start-up check, or the storage is unreachable, one line
naming it, before training), 2 bad config (one line naming the key), 3 a torchft run
(`ft.enabled`) stopped below `ft.min_replicas` (one line with the reason), 143 stopped by
SIGTERM and 130 by SIGINT (Ctrl-C) (after a final checkpoint when it fitted
`checkpoint.preemption_budget_s`; run again to resume). Whatever it is doing, the run ends
within `checkpoint.preemption_budget_s` + catalog.saving.STOP_MARGIN_S of the first signal,
and at once on a second one. An embedded run runs in a child
process in its own session (driver/embedded/lean.py): nothing of it outlives the driver; and,
unless it needs the network, in a network namespace of its own (driver/embedded/netns.py): nothing
of it listens on the machine's interfaces.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from catalog.errors import InputError
from catalog.saving import stop_grace_s

USAGE = "usage: python -m driver.train CONFIG.yaml [key=value ...] [--show-config]"
PREEMPTED = 143  # 128 + SIGTERM: the run stopped early on a preemption notice
INTERRUPTED = 130  # 128 + SIGINT: stopped by Ctrl-C, the same way
SHOW_CONFIG = "--show-config"


def embedded(cfg) -> bool:
    """Whether the run starts its own Ray (no run.address and no RAY_ADDRESS)."""
    return not (cfg.run.address or os.environ.get("RAY_ADDRESS"))


def output_format(cfg) -> str:
    """`progress` on an embedded Ray, `json` when joining a cluster, unless logging.format
    says. (A local run of a cluster's run definition keeps its run.cluster, so the Ray
    address decides, not the cluster name.)"""
    if cfg.logging.format != "auto":
        return cfg.logging.format
    return "progress" if embedded(cfg) else "json"


def main(argv: list[str] | None = None, supervised: bool = False) -> int:
    """Run the driver; returns the exit code (0, 1, 2, 130 or 143). `supervised` (the
    program's entry point) runs an embedded run in a child process in its own session."""
    args = list(sys.argv[1:] if argv is None else argv)
    show = SHOW_CONFIG in args
    args = [arg for arg in args if arg != SHOW_CONFIG]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    from driver.config.compose import compose

    try:
        cfg, config_yaml = compose(args[0], args[1:])
        check_resume(cfg, args[0])
        check_key(cfg, args[0])
        check_diloco(cfg)
        output_dir = prepare_output(cfg, config_yaml, args[0])
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    fmt = output_format(cfg)
    if fmt != "json":
        from driver.saved import resume_line

        resuming = resume_line(cfg)  # the first line of a run that goes on from a checkpoint
        print(resuming or "", end="\n" if resuming else "", flush=True)
    print(config_text(cfg, config_yaml, output_dir, fmt, show), end="", flush=True)
    if supervised and embedded(cfg):
        return _supervised(cfg, lambda: _run(cfg, config_yaml, output_dir, fmt, args[0]))
    return _run(cfg, config_yaml, output_dir, fmt, args[0])


def _supervised(cfg, run) -> int:
    """`run()` in a child process in its own session (driver/embedded/supervise.py); when a signal
    killed it before it could print its summary (a second Ctrl-C stops at once), the
    summary of what was saved is printed here."""
    from dataclasses import asdict

    from driver.embedded.netns import network_reason
    from driver.embedded.supervise import supervise

    done_r, done_w = os.pipe()
    os.set_blocking(done_r, False)

    def child() -> int:
        code = run()
        os.write(done_w, b"1")  # the run ended by itself and said how
        return code

    shared = network_reason(asdict(cfg), dict(os.environ))
    parent = os.getpid()
    code = supervise(child, isolate_network=shared is None)
    if os.getpid() != parent:  # the child, ending: its byte is for the parent to read
        return code
    os.close(done_w)
    try:
        finished = os.read(done_r, 1) == b"1"
    except BlockingIOError:
        finished = False
    os.close(done_r)
    if not finished and code > 128:
        from driver.saved import stopped_line

        print(stopped_line(cfg, code - 128), flush=True)
    return code


def config_text(cfg, config_yaml: str, output_dir: Path, fmt: str, show: bool) -> str:
    """What the driver says about the composed config at start: where it was saved (all of
    it with `--show-config` or `run.print_config`; in a cluster, one JSON line with all)."""
    if fmt == "json":
        return json.dumps({"run": cfg.run.name, "team": cfg.run.team, "config": config_yaml}) + "\n"
    if show or cfg.run.print_config:
        return config_yaml
    return f"config: {output_dir / 'config.yaml'} ({SHOW_CONFIG} prints it)\n"


def check_diloco(cfg) -> None:
    """A DiLoCo learner (`diloco.address` set) must find its Curve keys, in the `diloco.keys`
    folder or the environment variables `diloco.keys_env_prefix` names: else one line here,
    before Ray starts (InputError)."""
    if cfg.diloco.address:
        cfg.diloco.curve()


def check_key(cfg, source: str) -> None:
    """A cluster run (not embedded) must have its team's checkpoint key: without it every
    checkpoint it wrote would be signed with a key no other pod has (InputError)."""
    if embedded(cfg):
        return
    from driver.checkpoint.auth import KEY_ENV, MissingKey, load_secret

    try:
        load_secret(required=True)
    except MissingKey:
        raise InputError(source, "run.address", f"a cluster run needs {KEY_ENV} (the team's "
                         "checkpoint key, from its Secret); it is not set") from None  # fmt: skip


def prepare_output(cfg, config_yaml: str, source: str) -> Path:
    """Create `run.output_dir` and save the composed config there (InputError when the
    folder cannot be made or written: a file in the way, no permission, a full disk)."""
    output_dir = Path(cfg.run.output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(config_yaml)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise InputError(source, "run.output_dir", f"cannot write {output_dir}: {reason}") from None
    return output_dir


def check_resume(cfg, source: str) -> None:
    """An explicit `checkpoint.resume` URI must be a committed checkpoint (InputError)."""
    if cfg.checkpoint.resume in (None, "auto"):
        return
    from driver.checkpoint import CheckpointError
    from driver.checkpoint.loading import check_resume_uri

    try:
        check_resume_uri(cfg.checkpoint.resume)
    except CheckpointError as err:
        raise InputError(source, "checkpoint.resume", str(err)) from None


def _run(cfg, config_yaml: str, output_dir: Path, fmt: str, source: str) -> int:
    from driver.aux.coordinator import AuxStartError
    from driver.channel.stops import StopRelay
    from driver.fit import RunFailed
    from driver.launch import launch
    from driver.output import crash
    from driver.output.summary import format_summary

    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    stops = StopRelay(say, grace_s=stop_grace_s(cfg.checkpoint.preemption_budget_s)).install()
    try:
        check_storage_or_stop(cfg, output_dir, source)
        summary = launch(cfg, config_yaml, fmt, stops=stops)
    except InputError as err:  # found at launch (capacity, cluster shape): name the config
        err.source = err.source or source
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    except StorageUnreachable as err:  # nothing started: one line, the URI and the reason
        print(f"error: {err}", file=sys.stderr)
        return 1
    except RunFailed as err:
        print(f"error: run failed: {err}\ncrash bundle: {err.bundle}", file=sys.stderr)
        return err.exit_code
    except AuxStartError as err:  # a service failed its start-up check: nothing trained
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Interrupted before any worker could act on it
        signum = stops.signum or signal.SIGINT
        name = signal.Signals(signum).name
        print(f"stopped by {name} during start-up: nothing trained", file=sys.stderr)
        return 128 + signum
    except Exception as err:  # the driver itself failed: still leave a bundle behind
        bundle = crash.write_bundle(output_dir, config_yaml, err, {}, [traceback.format_exc()])
        print(f"error: driver failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"crash bundle: {bundle}", file=sys.stderr)
        return 1
    finally:
        stops.restore()
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(format_summary(summary), flush=True)
    if summary.get("ckpt_stopped"):  # storage refuses every save: stop, say it in one line
        print(f"error: run stopped: {summary['ckpt_stopped']}", file=sys.stderr, flush=True)
        return 1
    return exit_code(summary, stops.signum)


class StorageUnreachable(Exception):
    """The run cannot write its storage (driver/checkpoint/reach.py); one line."""


def check_storage_or_stop(cfg, output_dir: Path, source: str) -> None:
    """Probe the storage the run writes, for at most `checkpoint.storage_timeout_s`, before
    Ray starts (StorageUnreachable). A stop signal meanwhile stops the run at once."""
    from driver.checkpoint.reach import check_storage

    problem = check_storage(cfg, output_dir)
    if problem is not None:
        raise StorageUnreachable(f"{source}: {problem.line()}")


def exit_code(summary: dict, signum: int | None) -> int:
    """0 when done; 128 + the signal when one stopped the run before its last step."""
    stopped = summary.get("preempted_at") is not None or summary.get("stopped_by")
    if not stopped:
        return 0
    return 128 + signum if signum else PREEMPTED


if __name__ == "__main__":
    sys.exit(main(supervised=True))
