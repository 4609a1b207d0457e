"""A training process whose checkpoint write at step 6 stalls before the metadata is written.

python tests/checkpoint/slow_write_run.py ROOT   (test_faults kills it mid-write)
"""

from __future__ import annotations

import sys
import time

import driver.checkpoint.checkpointer as checkpointer
from driver.checkpoint.storage import make_writer
from tests.checkpoint.toy import config, make_state, train


def stalling_writer(uri: str, sync_files: bool, threads: int, nice: int = 0, chunk: int = 0):
    writer = make_writer(uri, sync_files, threads, nice, chunk)
    if uri.endswith("step-6"):
        finish = writer.finish

        def slow_finish(metadata, results):  # every shard is on disk, the metadata is not
            print("WRITING", flush=True)
            time.sleep(120)
            return finish(metadata, results)

        writer.finish = slow_finish
    return writer


def main() -> None:
    checkpointer.make_writer = stalling_writer
    ckpt = checkpointer.Checkpointer(config(sys.argv[1]), "team", "run")
    state = make_state()
    train(state, ckpt, 1, 6)
    print("STAGED", flush=True)  # the loop went on while the write stalls
    train(state, ckpt, 7, 8)
    ckpt.close()


if __name__ == "__main__":
    main()
