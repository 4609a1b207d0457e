"""Auxiliary services of a training run: encoders, evaluators and remote data stages on
persistent Ray actors, reached by training ranks through per-node proxies (docs/aux.md).

The remote-call layer (wire, errors, handler, worker, proxy, client, routing) carries
requests; the coordinator starts a run's services from the capacity plan; the FleetMonitor
aggregates their health and timings into the run's metrics; refresh broadcasts weights from
rank 0 to a service's workers. Importing this package imports neither Ray nor torch.
"""
