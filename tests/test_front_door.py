"""One front door: the library and the command line give the same answer.

For every method of every registry, on the authors' published graphs, `devplace_lite.partition`
/ `devplace_lite.latency` / `devplace_lite.bound` and ``devplace ... --json`` answer with the same
objective, bound, gap and status; every answer that is not proven optimal by its method carries
a certificate (a proven bound) through both doors; a certified gap of zero reads ``optimal``.
And a method is added in two places: one module and one registry entry.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

import devplace_lite as dl
from devplace_lite import methods
from devplace_lite.cli import main
from devplace_lite.solve import GAP_TOL, settle

KEYS = ("objective", "bound", "gap", "status")


def _cli(capsys, *argv) -> tuple[int, dict | None, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def _both(capsys, command: str, path, method: str, time_limit: float | None = None):
    """The library's and the CLI's answers (or both one-line refusals) for one method."""
    lib = getattr(dl, command)
    extra = () if time_limit is None else ("--time-limit", time_limit)
    try:
        res = lib(path, method=method, seed=0, time_limit=time_limit)
    except dl.DevplaceError as e:
        code, _, err = _cli(capsys, command, path, "--method", method, "--json", *extra)
        assert code == 2 and str(e) in err, (method, err)  # the same refusal, in one line
        return None, None
    code, out, err = _cli(capsys, command, path, "--method", method, "--json", *extra)
    assert code == 0, err
    return res.to_json(), out


def _agree(lib: dict, cli: dict, method: str) -> None:
    for key in KEYS:
        a, b = lib[key], cli[key]
        assert (a is None) == (b is None), (method, key, a, b)
        if a is not None and not isinstance(a, str):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12), (method, key, a, b)
        else:
            assert a == b, (method, key, a, b)


def _certified(ans: dict, method: str, exact: bool) -> None:
    if ans["status"] in ("infeasible", "unknown") or ans["objective"] is None:
        return
    if not exact:  # a heuristic's bound is the certificate's (or one it proved itself, and named)
        assert ans["bound"] is not None and ans["bound_method"], method
    assert ans["bound"] <= ans["objective"] * (1 + 1e-9), method
    if ans["gap"] is not None and ans["gap"] <= GAP_TOL:
        assert ans["status"] == "optimal", (method, ans["gap"], ans["status"])


def _slow(entry: methods.Method) -> bool:
    """An exact search beyond chains (the contiguous and general IPs) takes minutes on a published
    graph: both doors get the same time limit, and answer alike where both proved their answer."""
    return entry.exact and entry.limit == "anytime" and entry.split != "chain"


# Otherwise neither door is given a time limit: an anytime search then does its own fixed work
# (rounds, generations, patience), so both doors answer alike whatever the load.
@pytest.mark.parametrize("method", sorted(methods.PARTITION))
def test_partition_through_both_doors(capsys, reference_dir, method):
    path = reference_dir / "throughput-inputs" / "LayerGraphs" / "bert24_training.json"
    entry = methods.PARTITION[method]
    lib, cli = _both(capsys, "partition", path, method, 20.0 if _slow(entry) else None)
    if lib is None:
        return
    _certified(lib, method, entry.exact)
    _certified(cli, method, entry.exact)
    if not _slow(entry) or lib["status"] == cli["status"] == "optimal":
        _agree(lib, cli, method)


@pytest.mark.parametrize("method", sorted(methods.LATENCY))
def test_latency_through_both_doors(capsys, reference_dir, method):
    path = reference_dir / "latency-inputs" / "LayerGraphs" / "bert24_inference.json"
    lib, cli = _both(capsys, "latency", path, method)
    if lib is None:
        return
    _agree(lib, cli, method)
    _certified(lib, method, methods.LATENCY[method].exact)


@pytest.mark.parametrize("method", sorted(methods.BOUND))
def test_bound_through_both_doors(capsys, reference_dir, method):
    """Both doors, the same limit: the same bound where both proved it (status optimal), and in
    any case the same kind and a value below the optimum (the DP's)."""
    path = reference_dir / "throughput-inputs" / "LayerGraphs" / "bert24_training.json"
    g = dl.load_graph(path)
    b = dl.bound(path, method=method, time_limit=20.0).to_json()
    code, out, err = _cli(capsys, "bound", path, "--method", method, "-k", dl.Cluster.for_graph(g).k,
                          "--time-limit", 20, "--json")
    assert code == 0, err
    optimum = dl.partition(g, method="dp").objective
    assert b["kind"] == out["kind"] and max(b["bound"], out["bound"]) <= optimum * (1 + 1e-9), method
    if b["status"] == out["status"] == "optimal":
        assert b["bound"] == pytest.approx(out["bound"], rel=1e-9), method


def test_a_zero_gap_reads_optimal_for_every_method():
    """`settle` is the one place that turns a certified zero gap into ``optimal``: a heuristic's
    answer, an IP stopped at its limit and a bound that meets the objective alike."""
    from devplace_lite.generators import layered

    g = layered(10, seed=4)
    c = dl.Cluster(accelerators=2)
    r = dl.partition(g, c, "dp")
    for status in ("feasible", "time_limit"):
        raw = dl.partition(g, c, "greedy", certify=False)
        raw.status, raw.bound = status, raw.objective
        assert settle(raw).status == "optimal"
    raw = dl.partition(g, c, "greedy", certify=False)
    raw.bound = raw.objective * (1 - 1e-6)  # a real gap stays a gap
    assert settle(raw).status == "feasible" and r.status == "optimal"


def test_certify_false_is_the_raw_method():
    from devplace_lite.generators import layered

    g, c = layered(30, seed=2), dl.Cluster(accelerators=3)
    raw = dl.partition(g, c, "greedy", certify=False)
    assert raw.bound is None and "bound_kind" not in raw.extra
    assert dl.partition(g, c, "greedy", bound_time=0).bound is None


def test_a_closed_form_certificate_keeps_no_search_seconds(monkeypatch):
    """A method certified by a closed-form bound (family ``any``: the combinatorial bound, in
    milliseconds) gets the whole budget but `CLOSED_FORM_TIME`; one certified by a search
    (family ``chain``) still leaves that search its share."""
    from devplace_lite import solve
    from devplace_lite.generators import layered
    from devplace_lite.throughput import baselines, ip

    g, c = layered(10, seed=4), dl.Cluster(accelerators=2)
    given: dict[str, float] = {}

    def recorder(name):
        def run(graph, cluster, *, time_limit=None, seed=0):
            given[name] = time_limit
            return baselines.balance_by_time(graph, cluster)
        return run

    monkeypatch.setattr(ip, "ip_contiguous", recorder("any"))
    monkeypatch.setattr(ip, "ip_chain", recorder("chain"))
    assert methods.PARTITION["ip-contig"].certificate == "any" and methods.PARTITION["ip"].certificate == "chain"
    for name in ("ip-contig", "ip"):
        solve.partition(g, c, name, time_limit=20.0)
    left = 20.0 - min(solve.EXIT_SHARE * 20.0, solve.EXIT_MAX)
    assert given["any"] >= left - solve.CLOSED_FORM_TIME - 1.0  # 1 s: what the call itself took
    assert given["chain"] <= left - min(solve.BOUND_TIME, solve.BOUND_SHARE * given["any"])


TOY = '''
"""A toy method for the two-places test: everything on the first accelerator."""
import time

import numpy as np

from devplace_lite.result import Result


def toy(graph, cluster, *, time_limit=None, seed=0):
    t0 = time.perf_counter()
    a = np.zeros(graph.n, dtype=np.int64)
    res = Result("toy", graph, cluster, a, None, "feasible", 0.0)
    res.objective = res.check().max_load
    res.seconds = time.perf_counter() - t0
    return res
'''


def test_a_method_is_one_module_and_one_registry_entry(tmp_path, monkeypatch, capsys):
    """Adding a method touches two places (its module and its entry); the CLI, the library, the
    certificate and the CLI's help find it with nothing else changed."""
    (tmp_path / "toy.py").write_text(TOY)
    spec = importlib.util.spec_from_file_location("devplace_lite.toy", tmp_path / "toy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "devplace_lite.toy", module)  # as if it were devplace_lite/toy.py
    monkeypatch.setitem(methods.PARTITION, "toy", methods.Method("toy:toy", "throughput", "chain", False,
                                                                "polynomial", "everything on one accelerator"))
    from devplace_lite.generators import layered
    from devplace_lite.io import save_graph

    path = tmp_path / "g.json"
    save_graph(layered(12, seed=1), path)
    lib = dl.partition(path, dl.Cluster(accelerators=2), "toy").to_json()
    code, cli, err = _cli(capsys, "partition", path, "--method", "toy", "-k", 2, "--json")
    assert code == 0, err
    _agree(lib, cli, "toy")
    _certified(lib, "toy", exact=False)
    assert lib["bound_kind"] == "chain" and lib["gap"] > 0
    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    assert "toy" in capsys.readouterr().out
