"""The embedded Ray of a local run: everything the driver adapts when it starts its own Ray
on this machine (a cluster run keeps Ray's defaults). Each module says why. What the driver
trims from Ray Train for every run, embedded or not, is in driver/raytrain/.

- `lean`: the environment of an embedded Ray, and whether this process started the Ray it
  runs on (`started_here`);
- `ray_start`: `ray.init` without the daemons one machine does not need, a short raylet
  wait, the driver's own SIGTERM handler;
- `cluster`: a rendered run's cluster at a scaled-down shape on this machine;
- `supervise`, `netns`: nothing of a local run outlives its driver or listens outside it.
"""
