"""The lines the rules recognise: NCCL, collective timeouts, out of memory, storage,
non-finite losses, killed processes, preemptions (regular expressions, one place)."""

from __future__ import annotations

import re

TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|[Tt]imed out waiting \d+ ?ms|"
    r"collective operation timeout|NCCL timeout|DistBackendError.*[Tt]imeout|"
    r"ran for \d+ milliseconds before timing out"
)
NCCL = re.compile(
    r"ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
    r"NCCL WARN|NET/IB ?:|NET/Socket|transport/net|Connection reset by peer|"
    r"Connection closed by peer|port state.*(?:DOWN|down)|IB link down"
)
LINK_LOCAL = re.compile(
    r"NET/IB ?: .*(?:port|link).*(?:down|DOWN|error)|ibv_poll_cq|"
    r"mlx5_\d+:\d+ .*(?:down|error)|IB link down",
    re.IGNORECASE,
)
CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED")
HOST_OOM = re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (\d+)")
DISK_FULL = re.compile(r"No space left on device|ENOSPC|Errno 28|Disk quota exceeded|EDQUOT")
STORAGE_DENIED = re.compile(
    r"\b403\b.*(?:Forbidden|storage|bucket|gs://)|AccessDenied|"
    r"does not have storage\.objects\.\w+ access",
    re.IGNORECASE,
)
STORAGE_BUSY = re.compile(
    r"\b(?:429|503)\b.*(?:gs://|storage|bucket)|TooManyRequests|"
    r"SlowDown|Service Unavailable.*(?:gs://|storage)"
)
NONFINITE = re.compile(
    r"loss (?:is )?-?(?:nan|inf)\b|non-finite loss|nan loss|\"loss\": ?(?:NaN|-?Infinity)",
    re.IGNORECASE,
)
INJECTED = re.compile(r"debug\.fail_at_step=(\d+): injected failure")
CONFIG_ERROR = re.compile(r"^\S+\.ya?ml: [\w.]+: |ConfigCompositionException|ValidationError")
KILLED = re.compile(
    r"ActorDiedError|The actor died unexpectedly|Worker exits? unexpectedly|"
    r"SIGKILL|killed by signal 9|exit code -9|exit code 137|worker died|"
    r"RayActorError|was killed|The actor is dead|connection to the .* lost|"
    r"ProcessGroup.*(?:aborted|terminated)|below ft\.min_replicas|"
    r"AuxUnavailable|aux service .* (?:died|unavailable)",
    re.IGNORECASE,
)
PREEMPTED = re.compile(r"preempt|SIGTERM|spot.*(?:reclaim|termination)|NodeShutdown", re.IGNORECASE)
DEAD = re.compile(
    r"actor died unexpectedly|worker process has died|Worker unexpectedly exits|"
    r"killed by signal 9|SIGKILL|exit code 137|ActorDiedError",
    re.IGNORECASE,
)
