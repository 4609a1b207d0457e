"""Services shipped with the reference workloads: the DiT's frozen conditioning encoder
(`encoder.EncoderHandler`), an evaluator scoring refreshed weights on held-out data
(`evaluator.EvaluatorHandler`) and the data pipeline's remote stage (`stage.StageHandler`)."""
