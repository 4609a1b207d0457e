"""The Ray training driver: config -> capacity plan -> Ray Train workers -> training loop.

Run it with `python -m driver.train runs/train/tiny-lm.yaml [key=value ...]`; see docs/driver.md.
Importing this package imports neither torch nor ray.
"""
