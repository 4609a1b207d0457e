"""Checkpoint listeners live in `driver.aux.listeners` (auxiliary workers that hear about
every committed checkpoint); this name stays for the checkpoint layer's imports."""

from driver.aux.listeners import PREFIX, RayListeners, listener_name, listener_names

__all__ = ["PREFIX", "RayListeners", "listener_name", "listener_names"]
