"""Shipped config groups of the driver (model, data, optimizer, parallelism, checkpoint,
logging, aux); run configs under runs/train/ pick one option of each in their defaults list."""
