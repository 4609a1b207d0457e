"""Per-rank data pipeline: feeder → producers → collators over shared memory.

    from driver.data import DataPipeline, PipelineConfig
    with DataPipeline(dataset, PipelineConfig(batch_size=32), rank, world_size) as data:
        for batch in data: ...

See docs/data.md for the design, configuration, guarantees and failure behaviour.
"""

from driver.config.data import PipelineConfig
from driver.data.datasets import FileDataset, PackedDataset, PackedStrings, as_map_dataset
from driver.data.errors import CorruptSample, PipelineError, StageCrashed, StageHung
from driver.data.pipeline import DataPipeline
from driver.data.shards import ShardedDataset, write_shards
from driver.data.stages import FunctionStage, SampleContext, Stage, WorkerInfo, default_collate

__all__ = [
    "CorruptSample",
    "DataPipeline",
    "FileDataset",
    "FunctionStage",
    "PackedDataset",
    "PackedStrings",
    "PipelineConfig",
    "PipelineError",
    "SampleContext",
    "ShardedDataset",
    "Stage",
    "StageCrashed",
    "StageHung",
    "WorkerInfo",
    "as_map_dataset",
    "default_collate",
    "write_shards",
]
