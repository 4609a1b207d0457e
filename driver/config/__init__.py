"""The driver's configuration, in one place: the typed schema of every group and how a run's
config is composed and checked.

- `compose`: `compose("runs/train/tiny-lm.yaml", ["train.steps=20"])` -> (TrainConfig, YAML);
- `schema`: `TrainConfig` and the small sections (run, model, data, train, optimizer,
  parallelism, logging, aux, debug), registered as Hydra structured configs;
- one module per component's section: `checkpoint`, `ft`, `aux` (value checks of `aux.*`),
  `diloco` (a learner's settings), `data` (the shared-memory pipeline's `PipelineConfig`);
- `checks`, `errors`: value checks across sections, and one-line errors naming the key.

Shipped choices for each group are in `driver/conf/<group>/*.yaml`. Importing this package
imports neither Ray nor torch.
"""
