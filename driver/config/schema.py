"""Typed configuration of the driver: one dataclass per component, a docstring per field.

The dataclasses are registered as Hydra structured configs (`register()`), so an unknown key or a
value of the wrong type in a YAML file or an override is an error naming the key. Shipped choices
for each group live in `driver/conf/<group>/*.yaml`; `driver.config.compose.compose` builds a
`TrainConfig` from a run's YAML. Model and data have one schema per kind (`kind` field); the
checkpoint group's schema is `driver.config.checkpoint.CheckpointConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from driver.config.checkpoint import CheckpointConfig
from driver.config.diloco import LearnerConfig
from driver.config.ft import FtConfig


@dataclass
class RunConfig:
    name: str = "local"
    """Run name: part of the output folder, checkpoint paths and every label."""
    team: str = "default"
    """Team (Kubernetes namespace) that owns the run."""
    cluster: str = "local"
    """Cluster the run is on; `local` for an embedded Ray on this machine."""
    output_dir: str | None = None
    """Folder for config.yaml, metrics.jsonl and crash bundles; default outputs/<team>/<name>."""
    address: str | None = None
    """Ray address: null starts an embedded Ray unless RAY_ADDRESS is set; `auto` joins one."""
    local_cpus: int = 0
    """CPUs the embedded Ray may use; 0 means what the training workers need."""
    print_config: bool = False
    """Print the whole composed config at start (it is always saved as config.yaml in the
    output folder; `--show-config` does the same)."""
    local_dashboard: bool = False
    """Start Ray's dashboard (http://127.0.0.1:8265) with an embedded Ray. Off by default:
    the run shows its own progress, and the dashboard's processes would take about 2 % of
    a 2-core machine's CPUs from training."""


@dataclass
class ModelConfig:
    kind: str = MISSING
    """Which reference workload the model belongs to: `lm` or `dit`."""


@dataclass
class LMModelConfig(ModelConfig):
    kind: str = "lm"
    """Decoder-only language model."""
    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 2
    """Number of transformer blocks."""
    n_heads: int = 4
    """Attention heads per block; must divide d_model."""
    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of d_model."""


@dataclass
class DiTModelConfig(ModelConfig):
    kind: str = "dit"
    """DiT-style denoiser over image patches."""
    patch_size: int = 4
    """Side of a square patch in pixels; must divide data.image_size."""
    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 2
    """Number of transformer blocks (adaLN-conditioned on the noise level)."""
    n_heads: int = 4
    """Attention heads per block; must divide d_model."""


@dataclass
class DataConfig:
    kind: str = MISSING
    """Which dataset: `text` (generated corpus) or `shapes` (generated images)."""
    loader: str = "auto"
    """How each worker gets its batches: `inprocess` (made in the training process),
    `pipeline` (its shared-memory pipeline: feeder -> producers -> collators, prefetched
    ahead; docs/data.md) or `auto` (the pipeline for a run with a shape, i.e. a cluster's
    or `runner run --local --shape`; in process otherwise)."""
    producers: int = 2
    """Pipeline: producer processes per worker (fetch a sample, run its stages)."""
    collators: int = 1
    """Pipeline: collator processes per worker (samples -> one batch in shared memory)."""
    prefetch_batches: int = 4
    """Pipeline: shared-memory batch slots per worker (batches made ahead, plus the one in
    use; at least 2)."""
    work_queue_size: int = 64
    """Pipeline: bound of the feeder -> producers queue of tasks."""
    sample_queue_size: int = 64
    """Pipeline: bound of each producers -> collator queue of finished samples."""
    size: int = 4096
    """Number of examples in the dataset."""
    seed: int = 1234
    """Seed of the generator that makes the dataset (the same on every worker)."""
    remote_stage: str | None = None
    """Auxiliary service (`aux.services.<name>`, a driver.aux.services.stage handler) that
    runs the per-sample stage for several ranks (from the pipeline's producers, or from the
    training process in process). null: no remote stage."""


@dataclass
class TextDataConfig(DataConfig):
    kind: str = "text"
    """Generated text corpus with learnable structure."""
    seq_len: int = 64
    """Tokens per training example (the model sees seq_len, predicts the next token)."""


@dataclass
class ImageDataConfig(DataConfig):
    kind: str = "shapes"
    """Procedurally generated images of shapes."""
    image_size: int = 16
    """Side of a square image in pixels."""
    channels: int = 3
    """Colour channels per image."""


@dataclass
class TrainLoopConfig:
    steps: int = 100
    """Optimizer steps to run."""
    micro_batch_size: int = 16
    """Examples per worker per forward/backward pass."""
    grad_accum_steps: int = 1
    """Micro-batches accumulated per optimizer step."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping."""
    precision: str = "auto"
    """`auto` (bf16 autocast on GPU, fp32 on CPU), `bf16` or `fp32`."""
    seed: int = 0
    """Seed of model initialisation and data order."""


@dataclass
class OptimizerConfig:
    name: str = "adamw"
    """Optimizer; `adamw` is the one shipped."""
    lr: float = 3e-3
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW beta1 and beta2."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """Decoupled weight decay (not applied to biases and norms)."""
    warmup_steps: int = 10
    """Linear warm-up steps from 0 to lr."""
    schedule: str = "cosine"
    """After warm-up: `cosine` (decay to min_lr_ratio * lr at the last step) or `constant`."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of lr (cosine schedule)."""


@dataclass
class ShapeConfig:
    """The shape the run's manifest asks for (`runner render` sets it; `runner run --local
    --shape NODESxGPUS` a scaled-down one). Unset (0): a run without a manifest."""

    nodes: int = 0
    """Worker pods (nodes) of the run."""
    gpus_per_node: int = 0
    """GPUs each worker pod has."""
    accelerator: str = ""
    """The catalog's accelerator (H100, H200), or `cpu`: CPU workers stand in for GPUs."""
    cpus_per_gpu: float = 1.0
    """CPUs of a worker pod per GPU (a training worker's share)."""


@dataclass
class ParallelismConfig:
    workers: int | None = None
    """Training workers; null: every slot left after auxiliary services (GPUs, or CPU
    slots; an embedded Ray has two)."""
    device: str = "auto"
    """`auto` (GPU when the cluster has GPUs; `gpu` with a shape), `cpu` or `gpu` (one
    worker per GPU)."""
    cpus_per_worker: float | None = None
    """CPUs each training worker requests (a CPU slot); null: the shape's CPUs per GPU, or
    1."""
    fsdp_size: int | None = None
    """Workers that shard one model copy (an FSDP group; 1 replicates with DDP); null: one
    node's GPUs with a shape (FSDP within a node), else 1."""
    replica_group_size: int | None = None
    """Workers per replica group (a multiple of fsdp_size; the world is whole groups);
    null: one node's GPUs with a shape (whole nodes; one worker under ft), else fsdp_size."""
    groups_within_nodes: bool = True
    """Shard and replica groups never straddle nodes: each is a divisor or a whole
    multiple of a node's GPUs (a layout that breaks it is refused)."""
    backend: str = "auto"
    """Process-group backend: `auto` (nccl on GPU, gloo on CPU and for the CPU stand-ins of
    a simulated shape), `gloo` or `nccl`."""
    numa_affinity: bool = True
    """Pin each worker to the CPUs of its GPU's NUMA node where the node reports NUMA."""


@dataclass
class LoggingConfig:
    format: str = "auto"
    """`auto` (progress bar locally, JSON lines in a cluster), `progress` or `json`."""
    metrics_file: str = "metrics.jsonl"
    """File under the output folder that receives one JSON line per step."""
    tail_lines: int = 200
    """Log lines each worker keeps for a crash bundle."""
    clickhouse_url: str | None = None
    """ClickHouse HTTP endpoint (e.g. http://clickhouse.observability:8123): the driver
    also inserts every step's metrics into platform.run_metrics. null: metrics.jsonl only."""
    otel_endpoint: str | None = None
    """OpenTelemetry collector (OTLP/HTTP, e.g. http://otel-collector.observability:4318):
    the driver also exports the run's metrics there. null: no export."""
    store: bool = True
    """Write every rank's metrics and every process's log lines into the chDB store in the
    output folder (`chdb/`)."""
    bundle_root: str | None = None
    """Where crash bundles are kept after the run: `<bundle_root>/<team>/<run>/crash-<time>/`,
    signed (driver.output.crash_upload); `gs://<bundles bucket>` in a rendered run. null: the output
    folder only."""


@dataclass
class AuxServiceConfig:
    handler: str = ""
    """`module:Class` of the service's handler (driver.aux.handler.Handler: setup, ready,
    handle); each worker builds one with `kwargs`."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the handler's constructor (plain values; `${model}` and other
    interpolations resolve at composition)."""
    gpus_per_worker: float = 1.0
    """GPUs one worker of this service requests on GPU runs (fractions share a GPU on
    single-node runs; on multi-node runs each service type gets whole GPUs of its own)."""
    cpus_per_worker: float = 1.0
    """CPUs one worker of this service requests. On CPU runs its planner slots are
    cpus_per_worker / parallelism.cpus_per_worker."""
    train_workers_per_worker: int = 0
    """Training workers one service worker serves; 0 means a fixed count of min_replicas."""
    min_replicas: int = 1
    """Fewest workers of this service."""
    singleton: bool = False
    """Exactly one worker, whatever the size of the run."""
    placement: str = "SPREAD"
    """Ray placement-group strategy of the service's workers: SPREAD, PACK, STRICT_SPREAD
    or STRICT_PACK."""
    ready_timeout_s: float = 120.0
    """Seconds each worker has to start (setup) and answer its readiness check; the run
    stops before training, naming the service, when one does not."""
    deadline_s: float = 30.0
    """Per-request deadline: a training rank waits at most this long for a reply."""
    queue_bound: int = 64
    """Requests one worker queues per training rank before it pushes back."""
    full_policy: str = "wait"
    """When a rank's queue is full: `wait` (up to the deadline) or `fail_fast` (the caller
    gets AuxQueueFull at once)."""
    on_worker_death: str = "retry"
    """In-flight requests of a worker that dies: `retry` on another worker, or `error`
    (the caller gets AuxUnavailable)."""
    max_restarts: int = -1
    """Times Ray restarts a dead worker (-1: always)."""


@dataclass
class RefreshConfig:
    service: str | None = None
    """Service whose workers receive rank 0's model weights (e.g. the evaluator); null: off."""
    every_steps: int = 0
    """Broadcast the weights every N optimizer steps (0: off)."""
    backend: str = "auto"
    """Collective backend of the refresh group: `auto` (nccl on GPU, gloo on CPU), `gloo`
    or `nccl`."""
    timeout_s: float = 60.0
    """How long forming the refresh group and one broadcast may take."""


@dataclass
class AuxConfig:
    services: dict[str, AuxServiceConfig] = field(default_factory=dict)
    """Auxiliary services (encoders, evaluators) by name; planned before training workers."""
    condition: str | None = None
    """Service whose `encode` embeddings condition the model every step (the DiT); null:
    the model is conditioned on the noise level only."""
    evaluate: str | None = None
    """Service that scores the refreshed weights on held-out data after each refresh (its
    `evaluate` method); the score is a metric `aux/<service>/<name>`."""
    refresh: RefreshConfig = field(default_factory=RefreshConfig)
    """Weight refresh from rank 0 to a service's workers."""
    fleet_interval_s: float = 2.0
    """How often the FleetMonitor polls the workers and proxies (and ranks refresh their
    proxy table)."""

    def __post_init__(self) -> None:
        from driver.config.aux import check_aux

        check_aux(self)


@dataclass
class DebugConfig:
    fail_at_step: int | None = None
    """Raise an error at this step (to exercise failure handling and crash bundles)."""
    fail_rank: int = 0
    """Rank that raises at fail_at_step; -1 for every rank."""
    hold_replacement_s: float = 0.0
    """A started-again `fail_rank` (Ray Train's replacement after fail_at_step) waits this
    long before it joins the run: a replacement that finds no capacity, to drill a run
    left below `ft.min_replicas`."""
    hold_start_s: float = 0.0
    """The driver waits this long once Ray and the run's services are up, before it starts
    the training workers: a long start-up, to drill a stop signal during start-up."""
    hang_storage_check: bool = False
    """Hold the driver's main thread in native code during the storage check, for good, as
    a cloud client retrying does (drills the stop deadline: driver/checkpoint/reach.py)."""
    slow_save_s: float = 0.0
    """Every checkpoint write waits this long before it writes (a slow bucket), to drill a
    stop signal during a save."""
    flight_recorder_entries: int = 2000
    """PyTorch flight recorder: collectives kept per process group on each rank (0: off)."""
    kill_at_step: int | None = None
    """SIGKILL one rank's process at this step (0-based), once in the run (a marker in the
    output folder: a restart that replays the step does not kill again), to drill a lost
    worker: `kill_rank` at `kill_phase`."""
    kill_rank: int = 0
    """The rank kill_at_step kills."""
    kill_phase: str = "after"
    """When in the step: `before` (the forward pass), `during` (inside the cross-group
    reduce under torchft; the gradient sync otherwise) or `after` (its row sent)."""
    kills: list[str] = field(default_factory=list)
    """More kills, each `STEP:RANK[:PHASE]` (PHASE as kill_phase; default after), each once
    in the run: several failures (scripts/bench/ft_bench.py)."""
    stop_at_step: int | None = None
    """SIGSTOP `kill_rank`'s process at this step (a hung worker), once in the run."""
    term_at_step: int | None = None
    """SIGTERM `kill_rank`'s process at this step, before its forward pass (a worker pod's
    termination: driver.trainer.signals), once in the run."""
    await_replacements_at_step: int | None = None
    """After this step (0-based, its row sent), every rank waits until each rank killed by
    `kill_at_step`/`kills` before then has a replacement ready to train (a marker in the
    output folder), at most driver.trainer.faults.AWAIT_S: a drill whose survivors must see
    the replacement back, however slowly the machine starts a process."""
    digest: bool = False
    """Every rank's row carries `param_digest`, a hash of its parameters (its shards), so a
    test can see replicas equal after every step."""


@dataclass
class TrainConfig:
    run: RunConfig = field(default_factory=RunConfig)
    """Identity and placement of the run."""
    model: Any = MISSING
    """Model group (`driver/conf/model`)."""
    data: Any = MISSING
    """Data group (`driver/conf/data`)."""
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    """The training loop."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer and learning-rate schedule."""
    shape: ShapeConfig = field(default_factory=ShapeConfig)
    """The shape the run's manifest asks for (nodes, GPUs each, accelerator)."""
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    """Workers, devices and the parallel layout (unset keys derived from the shape)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint location, cadence and resume (`driver.config.checkpoint`)."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Progress display and metrics."""
    aux: AuxConfig = field(default_factory=AuxConfig)
    """Auxiliary services."""
    debug: DebugConfig = field(default_factory=DebugConfig)
    """Fault injection for tests and drills."""
    ft: FtConfig = field(default_factory=FtConfig)
    """Live fault tolerance with torchft (`driver.config.ft`)."""
    diloco: LearnerConfig = field(default_factory=LearnerConfig)
    """A DiLoCo learner's settings; `diloco.address` null: not a learner
    (`driver.config.diloco`)."""


def register() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(group="model", name="lm_schema", node=LMModelConfig)
    store.store(group="model", name="dit_schema", node=DiTModelConfig)
    store.store(group="data", name="text_schema", node=TextDataConfig)
    store.store(group="data", name="shapes_schema", node=ImageDataConfig)
    store.store(group="ft", name="ft_schema", node=FtConfig)
