"""The integer-program engine every model of the library is solved with (SCIP and HiGHS).

The models themselves live with their problem: the max-load IPs in `devplace_lite.throughput.ip`
(their cvxpy form in `devplace_lite.throughput.ip_cvx`), the latency IP in
`devplace_lite.single_sample.ip` (`devplace_lite.single_sample.ip_cvx`), the ordered-stage bounds
in `devplace_lite.throughput.bounds`. This package is what they share:

* `devplace_lite.mip.solve`: the linear model and the SCIP / HiGHS plumbing (time limit with
  incumbent and bound, warm start, one thread, seed);
* `devplace_lite.mip.highs_child`: a HiGHS solve in a child process, so a limit can kill it.
"""
