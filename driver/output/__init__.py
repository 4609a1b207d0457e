"""What a run shows and leaves behind in its output folder (`run.output_dir`).

- `progress`: the progress display (a bar locally, JSON lines in a cluster), draining the
  run's channel into metrics.jsonl and the other writers (driver.metrics);
- `summary`: the closing summary's lines;
- `crash`: the crash bundle a failed run writes;
- `logs`: a training worker's labelled log and the tail kept for the crash bundle.
"""
