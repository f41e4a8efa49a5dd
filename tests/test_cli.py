"""The CLI contract: --json answers, one-line errors with exit status 2, no torch for partition."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from devplace_lite.cli import main
from devplace_lite.generators import generate, skip_chain
from devplace_lite.io import save_graph


@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.json"
    save_graph(generate("series_parallel", 40, seed=3, training=True), p)
    return p


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("method", ["single", "uniform", "parameters", "time", "greedy", "random"])
def test_partition_json_contract(capsys, graph_file, method):
    code, out, err = run(capsys, "partition", graph_file, "--method", method, "-k", 3, "--cpus", 1, "--json")
    assert code == 0, err
    ans = json.loads(out)
    for key in ("objective", "status", "bound", "seconds", "placement", "gap"):
        assert key in ans
    assert ans["status"] in ("optimal", "feasible", "infeasible", "unknown", "time_limit")
    assert set(ans["placement"].values()) <= {"acc0", "acc1", "acc2", "cpu0"}
    assert ans["objective"] == pytest.approx(max(ans["loads"].values()))


def test_evaluate_scores_a_partition_answer(capsys, graph_file, tmp_path):
    answer = tmp_path / "p.json"
    assert run(capsys, "partition", graph_file, "--method", "time", "-k", 2, "--out", answer)[0] == 0
    code, out, _ = run(capsys, "evaluate", graph_file, answer, "-k", 2, "--json")
    ev = json.loads(out)
    assert code == 0 and ev["objective"] == pytest.approx(json.loads(answer.read_text())["objective"])
    assert ev["split"] == "chain" and ev["feasible"]


def test_convert_round_trip(capsys, graph_file, tmp_path):
    msr, back = tmp_path / "m.json", tmp_path / "b.json"
    assert run(capsys, "convert", graph_file, msr, "--to", "msr")[0] == 0
    assert "nodes" in json.loads(msr.read_text()) and "fpgaLatency" in json.loads(msr.read_text())["nodes"][0]
    assert run(capsys, "convert", msr, back)[0] == 0
    a = json.loads(run(capsys, "partition", graph_file, "--method", "uniform", "-k", 2, "--json")[1])
    b = json.loads(run(capsys, "partition", back, "--method", "uniform", "-k", 2, "--json")[1])
    assert a["objective"] == pytest.approx(b["objective"])


def test_info_reports_ideals_and_width(capsys, tmp_path):
    p = tmp_path / "chain.json"
    save_graph(skip_chain(12, seed=0, skip_prob=0.0), p)
    code, out, _ = run(capsys, "info", p, "--json")
    info = json.loads(out)
    assert code == 0 and info["nodes"] == 12 and info["ideals"] == 13 and info["width"] == 1


def test_info_text_states_sizes_and_times_with_units_and_json_keeps_numbers(capsys, tmp_path):
    from devplace_lite.graph import Graph, Node

    p = tmp_path / "g.json"
    save_graph(Graph([Node("a", p_acc=1.5, p_cpu=20.0, memory=3e9), Node("b", p_acc=0.25, memory=4.5e6)],
                     [("a", "b")], defaults={"memory": 16e9}), p)
    code, out, _ = run(capsys, "info", p)
    lines = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.splitlines()}
    assert code == 0
    assert lines["total_acc_work"] == "1.750 ms" and lines["total_cpu_work"] == "20.000 ms"
    assert lines["memory"] == "3.00 GB (3,004,500,000 bytes)"
    assert lines["defaults"] == "memory 16.00 GB (16,000,000,000 bytes)"
    info = json.loads(run(capsys, "info", p, "--json")[1])  # JSON unchanged: plain numbers in ms and bytes
    assert info["memory"] == 3004500000.0 and info["defaults"] == {"memory": 16e9} and info["total_acc_work"] == 1.75


def bad_inputs(tmp_path):
    cyclic = tmp_path / "cyclic.json"
    cyclic.write_text(json.dumps({"format": "devplace-graph", "version": 1, "nodes": [
        {"id": "a", "p_acc": 1}, {"id": "b", "p_acc": 1}], "edges": [["a", "b"], ["b", "a"]]}))
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"format": "devplace-graph", "version": 1, "nodes": [
        {"id": "a", "p_acc": 1}, {"id": "b"}], "edges": []}))
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"format": "devplace-graph", "version": 1, "nodes": [{"id": "a", "p_')
    good = tmp_path / "good.json"
    save_graph(generate("layered", 10, seed=0), good)
    return [
        (["partition", cyclic, "--method", "single"], "cycle through node"),
        (["partition", missing, "--method", "single"], "node b: missing field 'p_acc'"),
        (["info", truncated], "not valid JSON"),
        (["partition", good, "--method", "nonsense"], "unknown method 'nonsense'"),
        (["partition", good, "--method", "single", "-k", "-1"], "-k/--accelerators: expected an integer >= 0, got '-1'"),
        (["partition", tmp_path / "absent.json", "--method", "single"], "cannot read"),
        (["evaluate", good, missing], "not a placement"),
        (["partition", good], "--method"),
        (["bogus-command"], "invalid choice"),
    ]


def test_bad_inputs_give_one_line_and_status_2(capsys, tmp_path):
    for argv, needle in bad_inputs(tmp_path):
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, (argv, err)


def test_nothing_half_written_on_error(capsys, tmp_path, graph_file):
    out = tmp_path / "out.json"
    out.write_text("keep me")
    assert run(capsys, "convert", tmp_path / "absent.json", out)[0] == 2
    assert out.read_text() == "keep me"
    assert list(tmp_path.glob(".out.json.*")) == []


def test_console_script_and_no_torch_import(graph_file):
    code = ("import sys; from devplace_lite.cli import main; "
            f"rc = main(['partition', r'{graph_file}', '--method', 'time', '-k', '2', '--json']); "
            "import devplace_lite; assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "devplace_lite.cli", "partition", str(graph_file), "--method", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("devplace: error:") and p.stderr.count("\n") == 1


def test_a_latency_answer_carries_a_certifying_bound(capsys, tmp_path):
    """`devplace latency` bounds its answer as `partition` does (the latency bound registry:
    critical path, work, the path and interval programs, the segment bound); --bound-time 0
    skips it."""
    from devplace_lite.single_sample.segments import best_latency_bound
    from devplace_lite.devices import Cluster

    p = tmp_path / "g.json"
    g = generate("layered", 40, seed=5)
    save_graph(g, p)
    code, out, err = run(capsys, "latency", p, "--method", "greedy", "-k", 2, "--cpus", 1, "--json")
    ans = json.loads(out)
    assert code == 0, err
    want = best_latency_bound(g, Cluster(accelerators=2, cpus=1), q=ans["q"], upper=ans["objective"])
    assert ans["bound"] == pytest.approx(want.bound) and ans["bound_method"] == want.method
    assert 0 < ans["bound"] <= ans["objective"] * (1 + 1e-9) and ans["gap"] is not None
    code, out, _ = run(capsys, "latency", p, "--method", "greedy", "-k", 2, "--cpus", 1, "--json", "--bound-time", 0)
    assert code == 0 and json.loads(out)["bound"] is None


def test_a_latency_bound_past_the_reachability_limit_keeps_the_cheap_bounds(capsys, tmp_path, reach):
    from devplace_lite.methods import LATENCY_BOUND
    from devplace_lite.single_sample.bounds import critical_path_bound, latency_bound, work_bound
    from devplace_lite.devices import Cluster

    p = tmp_path / "g.json"
    g = generate("layered", 60, seed=1)
    save_graph(g, p)
    c = Cluster(accelerators=2, cpus=1)
    cheap = max(critical_path_bound(g, c), work_bound(g, c))
    assert latency_bound(g, c)[0] > cheap * 1.01  # so the answer below shows the path program was left out
    reach(LATENCY_BOUND, "best", 10)  # the path program refuses; greedy still answers
    code, out, err = run(capsys, "latency", p, "--method", "greedy", "-k", 2, "--cpus", 1, "--json")
    ans = json.loads(out)
    assert code == 0, err
    assert ans["bound"] == pytest.approx(cheap)
    assert ans["bound_method"] in ("critical-path", "work")


# -- commands other packages register (the course's `devplace grade`) ------------------------------
def _registered(monkeypatch, tmp_path, **commands: str) -> None:
    """Make `devplace_lite.cli` find ``commands`` (name -> module) in its entry-point group, as an
    installed package's metadata would list them."""
    from importlib.metadata import EntryPoint

    import devplace_lite.cli as cli

    eps = [EntryPoint(name, module, cli.GROUP) for name, module in commands.items()]
    monkeypatch.setattr(cli, "entry_points", lambda group: [e for e in eps if e.group == group])
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_command_registered_by_another_package_runs(monkeypatch, tmp_path, capsys):
    (tmp_path / "elsewhere_cmd.py").write_text(
        "HELP = 'a command from elsewhere'\n"
        "def add_arguments(p):\n    p.add_argument('word')\n"
        "def run(args):\n    print('said', args.word)\n    return 0\n")
    _registered(monkeypatch, tmp_path, hello="elsewhere_cmd", evaluate="elsewhere_cmd")
    assert main(["hello", "there"]) == 0
    assert capsys.readouterr().out == "said there\n"
    from devplace_lite.cli import _plugins

    assert _plugins()["evaluate"] == "devplace_lite.commands.evaluate"  # the library's own cannot be taken over


def test_the_help_lists_a_registered_command(monkeypatch, tmp_path, capsys):
    (tmp_path / "elsewhere_cmd2.py").write_text(
        "HELP = 'a command from elsewhere'\ndef add_arguments(p):\n    pass\ndef run(args):\n    return 0\n")
    _registered(monkeypatch, tmp_path, hello2="elsewhere_cmd2")
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "hello2" in capsys.readouterr().out


def test_a_registered_command_whose_package_is_gone_is_one_line_exit_2(monkeypatch, tmp_path, capsys):
    _registered(monkeypatch, tmp_path, gone="no_such_package_anywhere.cmd")
    assert main(["gone"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_package_anywhere" in err and "pip install" in err


def test_without_the_course_grade_is_no_command(monkeypatch, tmp_path, capsys):
    """The library installed alone: `devplace grade` is argparse's one line, exit 2."""
    _registered(monkeypatch, tmp_path)
    assert main(["grade", "--list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'grade'" in err


def test_the_project_registers_the_courses_grade():
    """What pyproject.toml declares is what an install registers: `devplace grade` from the course,
    a module of the commands' shape."""
    import importlib
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11

    from devplace_lite.cli import GROUP

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    declared = meta["project"]["entry-points"][GROUP]
    assert declared == {"grade": "devplace_course.grade"}
    mod = importlib.import_module(declared["grade"])
    assert isinstance(mod.HELP, str) and callable(mod.add_arguments) and callable(mod.run)
    assert any(p.startswith("devplace_course") for p in meta["tool"]["setuptools"]["packages"]["find"]["include"])
