"""Preflight: checks that the machines of a run are healthy before it burns GPU hours.

One suite (`runner.preflight.suite`) with one entry point that runs inside a pod,
`python -m runner.preflight`. It checks kernel logs (Xid, SXid, ECC, row remapping, PCIe
AER, NVLink, OOM kills, hung tasks), `nvidia-smi` state, host memory, /dev/shm, mounts,
libraries and NCCL transport settings, a matmul per GPU and an all-reduce across all pods.

- `runner preflight RUN` execs the suite in every pod of a run (`runner.preflight.remote`);
- `runner check NODE` runs it as a Job pinned to one node (`runner.nodecheck`);
- `runner preflight --local` runs it on this machine (CPU path, 2-process gloo all-reduce).

Docs: docs/preflight.md. Nothing here imports torch at module level.
"""
