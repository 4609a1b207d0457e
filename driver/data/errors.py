"""Errors raised by the data pipeline; each message names the stage and the sample."""

from __future__ import annotations


class PipelineError(RuntimeError):
    """The data pipeline cannot continue; its worker processes have been stopped."""


class StageCrashed(PipelineError):
    """A feeder, producer or collator process exited while the pipeline was running."""


class StageHung(PipelineError):
    """A producer or collator spent longer than its timeout on one sample or batch."""


class CorruptSample(PipelineError):
    """Fetching or transforming a sample raised and the policy is on_corrupt="fail"."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index
