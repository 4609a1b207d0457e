"""The embedded Ray of a local run: everything the driver adapts when it starts its own Ray
on this machine (a cluster run keeps Ray's defaults). Each module says why.

- `lean`: the environment and the trimmed Ray Train trainer of an embedded run, and whether
  this process started the Ray it runs on (`started_here`);
- `ray_start`: `ray.init` without the daemons one machine does not need, a short raylet
  wait, the driver's own SIGTERM handler;
- `controller`, `controller_thread`: Ray Train's controller in the driver's process;
- `backend`: Ray Train's torch backend without torch in the driver;
- `lazy_sync`: Ray Train's synchronization actor created only on first use;
- `supervise`, `netns`: nothing of a local run outlives its driver or listens outside it.
"""
