"""Integer programs for device placement (Tarnawski et al., NeurIPS 2020), on open solvers.

* `devplace_lite.mip.throughput`: the max-load IP for chain, contiguous and non-contiguous
  splits (``devplace partition --method ip|ip-contig|ip-noncontig``);
* `devplace_lite.mip.latency`: the single-sample latency IP with ``q`` calls per accelerator,
  warm-started from `devplace_lite.latency_search` (``devplace latency --method ip``);
* `devplace_lite.mip.cvx`: the same models written in cvxpy, to read (the chapters print them);
* `devplace_lite.mip.solve`: the linear model and the SCIP / HiGHS plumbing (time limit with
  incumbent and bound, warm start, one thread, seed).
"""
