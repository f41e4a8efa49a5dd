"""The cvxpy versions the chapters print solve to the same optima as the library's models."""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cvxpy")

from devplace_lite.devices import Cluster  # noqa: E402
from devplace_lite.generators import generate, with_backward  # noqa: E402
from devplace_lite.single_sample.ip_cvx import latency_problem
from devplace_lite.throughput.ip_cvx import throughput_problem  # noqa: E402
from devplace_lite.single_sample.ip import latency_ip  # noqa: E402
from devplace_lite.throughput.ip import throughput_ip  # noqa: E402


@pytest.mark.parametrize("g,c", [
    (generate("cells", 7, seed=1), Cluster(2, 1)),
    (with_backward(generate("layered", 4, seed=2)), Cluster(2, 2, memory=6e7)),
])
@pytest.mark.parametrize("kind", ["chain", "contiguous", "noncontiguous"])
def test_throughput_problem_matches(g, c, kind):
    prob, _ = throughput_problem(g, c, kind)
    prob.solve(solver=cp.HIGHS)
    r = throughput_ip(g, c, kind)
    assert r.status == "optimal" and prob.value == pytest.approx(r.objective, rel=1e-6)


@pytest.mark.parametrize("q", [1, 2])
def test_latency_problem_matches(q):
    g, c = generate("series_parallel", 5, seed=3), Cluster(2, 1, memory=float(np.sort(generate(
        "series_parallel", 5, seed=3).memory)[-3:].sum()))
    prob, _ = latency_problem(g, c, q)
    prob.solve(solver=cp.HIGHS)
    r = latency_ip(g, c, q)
    assert r.status == "optimal" and prob.value == pytest.approx(r.objective, rel=1e-6)
