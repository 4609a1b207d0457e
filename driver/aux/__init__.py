"""Auxiliary services of a training run: encoders, evaluators and remote data stages on
persistent Ray actors, reached by training ranks through per-node proxies (docs/aux.md).

The remote-call layer carries requests in the driver's message format (driver.messaging:
envelope, payload, multipart, wire): errors, handler, routing, worker, proxy (+
proxy_requests, proxy_workers), client (+ client_io, client_requests, calls) and shared
memory on one node (shm, shm_client, shm_worker). The coordinator starts a run's services
from the capacity plan; the FleetMonitor aggregates their health and timings into the run's
metrics; refresh broadcasts weights from rank 0 to a service's workers. Importing this
package imports neither Ray nor torch.
"""
