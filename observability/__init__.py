"""Observability: NCCL Inspector records, straggler analysis, PyTorch flight recorder.

- `observability.inspector`: parse NCCL Inspector's JSON lines into `platform.nccl_collectives`
  rows (the same mapping as the ClickHouse materialized view in
  observability/sql/schema.sql).
- `observability.stragglers`: the straggler analysis, SQL under `observability/sql/` run in
  chDB (local) or ClickHouse (cluster), and the same query text for Grafana.
- `observability.reference`: the same analysis in pandas (benchmark peer, cross-check).
- `observability.synthetic`: collective records with injected stragglers (numpy, columnar).
- `observability.flight_recorder`: PyTorch flight recorder settings for training ranks, its
  dumps read (JSON, or pickles of plain data only); `observability.fr_analysis`: what the
  dumps of all ranks say (last collective per rank, who never entered, mismatches).

Imports only `catalog` from the project. See docs/observability.md.
"""
