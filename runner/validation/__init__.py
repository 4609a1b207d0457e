"""Checks of run definitions (inputs.py) and of rendered manifests (manifests.py)."""
