"""Issue 17's reproductions, one test each: every input a hostile user tried is answered (exit 0
with a right answer) or refused (exit 2, one line naming file, node and field, nothing written).

Most run `devplace_lite.cli.main` in-process; FIFOs, signals and exit codes run the command in a
subprocess. The property tests that generate such inputs are in test_contract_properties.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devplace_lite import cli, methods, options, solve
from devplace_lite.cli import main
from devplace_lite.errors import GraphError, LimitError, UsageError
from devplace_lite.files import MAX_INPUT_BYTES, read_input, write_atomic
from devplace_lite.devices import Cluster
from devplace_lite.throughput.exhaustive import exhaustive
from devplace_lite.generators import generate
from devplace_lite.io import graph_to_msr, load_graph, save_graph

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, needle, *argv):
    """Assert the command is refused with one line holding ``needle``; return that line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert err.count("\n") == 1 and err.startswith("devplace: error: ") and needle in err, err
    assert out == ""
    return err


def native(nodes, edges=(), **top):
    return {"format": "devplace-graph", "version": 1, "nodes": list(nodes), "edges": list(edges), **top}


TWO = [{"id": "a", "p_acc": 1, "p_cpu": 2}, {"id": "b", "p_acc": 1, "p_cpu": 2}]


@pytest.fixture
def msr(tmp_path):
    """A small graph in the authors' format, as a dict to spoil and a writer."""
    obj = graph_to_msr(generate("layered", 8, seed=1))
    obj.update(maxFPGAs=2, maxCPUs=1)

    def write(mutate, name="m.json"):
        doc = json.loads(json.dumps(obj))
        mutate(doc)
        p = tmp_path / name
        p.write_text(json.dumps(doc))
        return p
    return write


def write(tmp_path, doc, name="g.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


# -- misread silently, now refused ------------------------------------------------------------
@pytest.mark.parametrize("value", ["false", "0", "no", 2, 0.0, None])
def test_native_flag_must_be_bool_or_0_1(capsys, tmp_path, value):
    p = write(tmp_path, native([{"id": "a", "p_acc": 1, "p_cpu": 2, "supported": value}]))
    refused(capsys, f"g.json: node a: field 'supported' must be true, false, 1 or 0, got {json.dumps(value)}",
            "info", p)


def test_native_flags_take_0_and_1(capsys, tmp_path):
    p = write(tmp_path, native([{"id": "a", "p_acc": 1, "p_cpu": 2, "supported": 0, "backward": 0}]))
    assert load_graph(p).supported.tolist() == [False]


@pytest.mark.parametrize("field,value", [("supportedOnFpga", "0"), ("isBackwardNode", "no"),
                                         ("supportedOnFpga", "false")])
def test_msr_flags_are_not_strings(capsys, msr, field, value):
    def spoil(d):
        d["nodes"][3][field] = value
    nid = graph_to_msr(generate("layered", 8, seed=1))["nodes"][3]["id"]
    refused(capsys, f"m.json: node {nid}: field '{field}' must be true, false, 1 or 0", "info", msr(spoil))


def test_fractional_device_count_is_refused_not_rounded(capsys, msr):
    refused(capsys, "m.json: msr graph: field 'maxFPGAs' must be a whole number, got 2.7", "partition",
            msr(lambda d: d.update(maxFPGAs=2.7)), "--method", "time")


def test_null_id_is_refused_not_named_none(capsys, tmp_path):
    p = write(tmp_path, native([{"id": None, "p_acc": 1}]))
    refused(capsys, "g.json: node #0: field 'id' must be a non-empty string or an integer, got null", "info", p)


def test_integer_ids_are_read_as_strings(tmp_path):
    g = load_graph(write(tmp_path, native([{"id": 7, "p_acc": 1}, {"id": "8", "p_acc": 1}], [[7, 8]])))
    assert g.ids == ["7", "8"] and g.edges == [("7", "8")]


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e10", "x"])
def test_time_limit_must_be_finite_and_positive(capsys, tmp_path, value):
    p = write(tmp_path, native(TWO))
    refused(capsys, f"--time-limit: expected a finite number in (0, 1e+09], got '{value}'",
            "partition", p, "--method", "ip", "--time-limit", value)


# -- tracebacks, now one line -----------------------------------------------------------------
@pytest.mark.parametrize("top,needle", [
    ({"defaults": None}, "g.json: native graph: 'defaults' must be an object, got null"),
    ({"defaults": [1]}, "g.json: native graph: 'defaults' must be an object, got a list"),
    ({"meta": "x"}, "g.json: native graph: 'meta' must be an object, got a string"),
    ({"defaults": {"accelerators": "two"}}, "field 'accelerators' is not a number: \"two\""),
    ({"defaults": {"accelerators": 1.5}}, "field 'accelerators' must be a whole number, got 1.5"),
    ({"defaults": {"gpus": 2}}, "'defaults' has unknown field(s) ['gpus']"),
    ({"defaults": {"memory": 0}}, "field 'memory' must be positive"),
    ({"nodes": {}}, "'nodes' must be a list"),
    ({"version": True}, "unsupported version true"),
    ({"defualts": {}}, "unknown top-level field(s) ['defualts']"),
])
def test_top_level_parts_have_their_types(capsys, tmp_path, top, needle):
    refused(capsys, needle, "partition", write(tmp_path, {**native(TWO), **top}), "--method", "single")


@pytest.mark.parametrize("text,needle", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than the parser's limit (about"),
    ('{"a": ' + "9" * 5000 + "}", "not valid JSON (an integer of more than 4300 digits)"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ('{"a": -Infinity}', "-Infinity is not a JSON number"),
    ("", "not valid JSON"),
])
def test_json_overflows_are_refused(capsys, tmp_path, text, needle):
    refused(capsys, needle, "info", write(tmp_path, text))


def test_number_past_the_float_range_is_refused(capsys, tmp_path, msr):
    p = write(tmp_path, '{"format": "devplace-graph", "version": 1, "nodes": [{"id": "a", "p_acc": 1e309}], "edges": []}')
    refused(capsys, "g.json: node a: field 'p_acc' is out of range (not a finite number)", "info", p)
    refused(capsys, "field 'maxFPGAs' is out of range", "info", msr(lambda d: d.update(maxFPGAs=10**400)))
    p = write(tmp_path, json.dumps(native(TWO, meta={"x": 0.5})).replace("0.5", "-1e309"))
    refused(capsys, "g.json: native graph: 'meta': holds a number out of range: -inf", "convert", p, tmp_path / "o.json")


@pytest.mark.parametrize("field,what", [("p_acc", "time (p_acc + p_cpu + comm)"), ("comm", "time (p_acc + p_cpu + comm)"),
                                        ("memory", "memory"), ("flops", "flops")])
@pytest.mark.parametrize("command", [["info"], ["partition", "--method", "greedy"], ["bound", "-k", "2"]])
def test_totals_past_the_float_range_are_refused_at_load(capsys, tmp_path, field, what, command):
    """Each value finite, their sum infinite: answered before with null loads and an "infeasible" bound."""
    nodes = [{"id": f"n{i}", "p_acc": 1.0, field: 1.7e308} for i in range(4)]
    p = write(tmp_path, native(nodes, [[f"n{i}", f"n{i + 1}"] for i in range(3)]))
    refused(capsys, f"g.json: the nodes' total {what} is beyond the float range, over the 1e+300",
            command[0], p, *command[1:])


def test_totals_in_the_float_range_but_past_the_headroom_are_refused(capsys, tmp_path, msr):
    refused(capsys, "m.json: the nodes' total time (p_acc + p_cpu + comm) is 1.6e+300, over the 1e+300",
            "info", msr(lambda d: d["nodes"][0].update(cpuLatency=1.6e300)))
    code, out, _ = run(capsys, "info", msr(lambda d: d["nodes"][0].update(cpuLatency=1e299)), "--json")
    assert code == 0 and json.loads(out)["total_cpu_work"] >= 1e299


@pytest.mark.parametrize("method", ["kl", "local-search"])
def test_loads_whose_squares_overflow_are_searched(capsys, tmp_path, method):
    """Times of 1e200 load (under the 1e300 headroom), but the search's squared-load tie-break
    raised OverflowError (a traceback); it now squares loads in a power-of-two unit."""
    nodes = [{"id": f"n{i}", "p_acc": (1 + i % 3) * 1e200, "p_cpu": 1e201} for i in range(8)]
    p = write(tmp_path, native(nodes, [[f"n{i}", f"n{i + 1}"] for i in range(7)]))
    code, out, err = run(capsys, "partition", p, "-k", "3", "--method", method, "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["status"] in ("feasible", "optimal") and 5e200 <= ans["objective"] <= 15e200  # optimum 6e200, total 15e200


@pytest.mark.parametrize("text,key", [
    ('{"format": "devplace-graph", "version": 1, "nodes": [{"id": "a", "id": "b", "p_acc": 1}], "edges": []}', '"id"'),
    ('{"format": "devplace-graph", "version": 1, "nodes": [{"id": "a", "p_acc": 1}], "edges": [], '
     '"defaults": {"memory": 1, "memory": 2}}', '"memory"')])
def test_a_key_twice_in_one_object_is_refused(capsys, tmp_path, text, key):
    """Python's parser kept the last of two keys: {"id": "a", "id": "b"} was node b, silently."""
    refused(capsys, f"g.json: the key {key} appears twice in one object", "info", write(tmp_path, text))


def test_non_utf8_is_refused(capsys, tmp_path):
    p = tmp_path / "latin1.json"
    p.write_bytes(b'{"format": "devplace-graph", "version": 1, "name": "caf\xe9", "nodes": [], "edges": []}')
    refused(capsys, "latin1.json: not UTF-8 text (byte 0xe9 at offset 55)", "info", p)


def test_seed_must_be_non_negative(capsys, tmp_path):
    refused(capsys, "--seed: expected an integer in [0, 4294967295], got '-1'",
            "partition", write(tmp_path, native(TWO)), "--method", "random", "--seed", "-1")


def test_place_rl_learning_rate_must_be_finite(capsys, tmp_path):
    refused(capsys, "--lr: expected a finite number in (0, 10], got 'nan'",
            "place-rl", "train", "--lr", "nan", "--out", tmp_path / "p.pt")
    assert not (tmp_path / "p.pt").exists()


@pytest.mark.parametrize("doc,needle", [
    ({"fpgas": [1, 2]}, "expert split: fpgas[0] must be an object with a 'nodes' list"),
    ({"fpgas": [{"nodes": 5}]}, "expert split: fpgas[0] must be an object with a 'nodes' list"),
    ({"fpgas": "x"}, "expert split: 'fpgas' must be a list of parts"),
    ({"fpgas": [{"nodes": [[1]]}]}, "expert split: fpgas[0]: field 'nodes' must be a non-empty string or an integer"),
    ({"fpgas": [{"nodes": ["a"]}], "cpus": [{"nodes": ["a"]}]}, "expert split: node a is in acc0 and in cpu0"),
    ({"placement": {"a": 0}}, "placement: node a must map to a device name"),
    ([1, 2], "not a placement"),
])
def test_placements_of_the_wrong_shape_are_one_line(capsys, tmp_path, doc, needle):
    g = write(tmp_path, native(TWO))
    refused(capsys, needle, "evaluate", g, write(tmp_path, doc, "p.json"), "--cpus", 1)


# -- hangs and runaway memory -------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["partition", "{g}", "--method", "time", "-k", "1000000000", "--json"],
    ["bound", "{g}", "-k", "1000000000", "--method", "combinatorial", "--json"],
    ["evaluate", "{g}", "{p}", "-k", "1000000000", "--cpus", "1000000000000", "--json"],
])
def test_absurd_device_counts_are_clamped_and_said(capsys, tmp_path, argv):
    g = tmp_path / "g.json"
    save_graph(generate("layered", 12, seed=0), g)
    p = write(tmp_path, {str(i): "acc0" for i in range(12)}, "p.json")
    code, out, err = run(capsys, *[a.format(g=g, p=p) for a in argv])
    ans = json.loads(out)
    assert code == 0 and ans["clamped"]["accelerators"] == [1_000_000_000, 12], err
    assert "12 node(s)" in ans["clamped"]["reason"]


def test_no_device_names_where_each_zero_came_from(capsys, msr):
    """"cluster: needs at least one device" named neither the option nor the file's field."""
    p = msr(lambda d: d.update(maxFPGAs=0, maxCPUs=0))
    refused(capsys, "needs at least one device, got -k 0 (the graph file's value) and --cpus 0 (the graph file's value)",
            "partition", p, "--method", "greedy")
    refused(capsys, "needs at least one device, got -k 0 and --cpus 0 (the default)",
            "partition", msr(lambda d: d.pop("maxCPUs")), "--method", "greedy", "-k", 0)


def test_clamping_keeps_the_devices_a_placement_names(capsys, tmp_path):
    """acc7 exists with -k 8 on a 4-node graph; the clamp to 4 accelerators made evaluate refuse it."""
    g = write(tmp_path, native([{"id": x, "p_acc": 1, "p_cpu": 2, "comm": 0.5} for x in "abcd"],
                               [["a", "b"], ["b", "c"], ["c", "d"]]))
    p = write(tmp_path, {"a": "acc7", "b": "acc7", "c": "acc5", "d": "cpu6"}, "p.json")
    code, out, err = run(capsys, "evaluate", g, p, "-k", 8, "--cpus", 8, "--json")
    ans = json.loads(out)
    assert code == 0, err
    assert ans["objective"] == 2.5 and ans["bottleneck"] == "acc7" and ans["devices"]["cpu6"]["load"] == 2
    assert list(ans["devices"]) == [f"acc{i}" for i in range(8)] + [f"cpu{i}" for i in range(7)]
    assert ans["clamped"]["cpus"] == [8, 7] and "accelerators" not in ans["clamped"]
    refused(capsys, "device acc7 does not exist: the cluster has 4 accelerator(s)", "evaluate", g, p, "-k", 4, "--cpus", 8)


@pytest.mark.parametrize("device,needle", [
    ("acc65536", "the placement names acc65536: evaluating keeps at most 65536 devices of a kind"),
    ("acc999999999999", "the placement names acc999999999999"),
    ("acc" + "9" * 5000, "does not exist: the cluster has 1000000000000 accelerator(s)"),  # was a ValueError traceback
    ("cpu" + "9" * 5000, "does not exist: the cluster has 1 CPU core(s)"),
    ("acc01", "unknown device name 'acc01' (expected acc0.. or cpu0.., decimal, no leading zeros)"),
    ("acc\uff11", "unknown device name"),  # a full-width 1 was read as acc1
    ("acc-1", "unknown device name"), ("ACC0", "unknown device name"), (" acc0", "unknown device name"),
    ("gpu0", "unknown device name"),
])
def test_huge_or_misspelled_device_names_are_refused_without_allocating(capsys, tmp_path, device, needle):
    g = write(tmp_path, native([{"id": x, "p_acc": 1, "p_cpu": 2} for x in "abcd"]))
    p = write(tmp_path, {"a": device, "b": "acc0", "c": "acc0", "d": "acc0"}, "p.json")
    line = refused(capsys, needle, "evaluate", g, p, "-k", 10**12, "--cpus", 1)
    assert len(line) < 300


def test_a_placement_at_the_device_cap_is_answered(capsys, tmp_path):
    g = write(tmp_path, native([{"id": x, "p_acc": 1, "p_cpu": 2} for x in "ab"]))
    p = write(tmp_path, {"a": f"acc{options.KEEP_DEVICES - 1}", "b": "cpu3"}, "p.json")
    code, out, err = run(capsys, "evaluate", g, p, "-k", 10**12, "--cpus", 10**12, "--json")
    ans = json.loads(out)
    assert code == 0 and ans["clamped"]["accelerators"] == [10**12, options.KEEP_DEVICES] and ans["clamped"]["cpus"] == [10**12, 4]
    assert ans["objective"] == 2 and len(ans["devices"]) == options.KEEP_DEVICES + 4


@pytest.mark.parametrize("doc,needle", [
    ({"a": 0, "b": "acc0"}, "not a placement"), ({"a": True, "b": "acc0"}, "not a placement"),
    ({"a": 0.0, "b": "acc0"}, "not a placement"), ({"a": None, "b": "acc0"}, "not a placement"),
    ({"placement": {"a": -1, "b": "acc0"}}, "placement: node a must map to a device name"),
    ({"placement": {"a": ["acc0"], "b": "acc0"}}, "placement: node a must map to a device name"),
    ([0, 1], "not a placement"), ("\"acc0\"", "not a placement"), ({"a": "acc0"}, "placement leaves node b unplaced"),
    ({"a": "acc0", "b": "acc0", "zz": "acc0"}, "placement names unknown node zz"),
    ({"a": "acc1", "b": "acc0"}, "device acc1 does not exist: the cluster has 1 accelerator(s)"),
    ({"a": "cpu0", "b": "acc0"}, "device cpu0 does not exist: the cluster has 0 CPU core(s)"),
])
def test_placements_of_wrong_types_and_devices_are_one_line(capsys, tmp_path, doc, needle):
    g = write(tmp_path, native(TWO))
    refused(capsys, needle, "evaluate", g, write(tmp_path, doc, "p.json"))


def test_device_count_from_the_file_is_clamped(capsys, msr):
    code, out, _ = run(capsys, "partition", msr(lambda d: d.update(maxFPGAs=1e18)), "--method", "uniform", "--json")
    ans = json.loads(out)
    assert code == 0 and ans["accelerators"] == 8 and ans["clamped"]["accelerators"] == [10**18, 8]


@pytest.mark.parametrize("kind", ["chain", "any"])
def test_clamping_keeps_the_optimum(kind):
    """A graph of n nodes keeps at most n devices of a kind busy: the optimum on the clamped
    cluster is the optimum on the asked one (exhaustive search of both)."""
    g = generate("layered", 4, seed=2)
    big = Cluster(accelerators=6, cpus=5)
    small, note = options.clamp_cluster(big, g.n)
    assert (small.k, small.l) == (4, 4) and note["accelerators"] == [6, 4] and note["cpus"] == [5, 4]
    assert exhaustive(g, small, kind=kind).objective == pytest.approx(exhaustive(g, big, kind=kind).objective)
    assert options.clamp_cluster(small, g.n) == (small, None)


@pytest.mark.parametrize("path,kind", [("/dev/zero", "a character device"), ("{tmp}", "a directory")])
def test_special_files_are_refused_before_reading(capsys, tmp_path, path, kind):
    refused(capsys, f"not a regular file ({kind})", "info", path.format(tmp=tmp_path))


def test_size_limit_is_stated(tmp_path):
    p = write(tmp_path, "x" * 100)
    with pytest.raises(LimitError, match="100 bytes, over the 99 bytes an input may have"):
        read_input(p, limit=99)
    assert MAX_INPUT_BYTES == 1 << 30 and "1 GiB" in (ROOT / "docs" / "graph-format.md").read_text()


def subprocess_cli(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "devplace_lite.cli", *map(str, argv)], capture_output=True,
                          text=True, **kw)


def test_fifo_without_writer_does_not_block(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    p = subprocess_cli("info", fifo, timeout=60)
    assert p.returncode == 2 and p.stderr == f"devplace: error: {fifo}: not a regular file (a FIFO)\n"


# -- writes ----------------------------------------------------------------------------------------
@pytest.fixture
def graph(tmp_path):
    p = tmp_path / "g.json"
    save_graph(generate("layered", 10, seed=0), p)
    return p


def test_character_device_output_is_not_replaced(capsys, graph):
    before = os.stat("/dev/null")
    refused(capsys, "/dev/null: not a regular file (a character device); refusing to replace it",
            "convert", graph, "/dev/null")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


@pytest.mark.parametrize("how", ["same", "dot", "hardlink", "symlink"])
def test_output_equal_to_an_input_is_refused(capsys, graph, tmp_path, how):
    out = {"same": graph, "dot": tmp_path / "." / "g.json", "hardlink": tmp_path / "h.json",
           "symlink": tmp_path / "s.json"}[how]
    if how == "hardlink":
        os.link(graph, out)
    if how == "symlink":
        out.symlink_to(graph)
    before = graph.read_bytes()
    refused(capsys, "is the input", "partition", graph, "--method", "time", "--out", out)
    refused(capsys, "is the input", "convert", graph, out, "--to", "msr")
    assert graph.read_bytes() == before


@pytest.mark.parametrize("out", ["", "{tmp}/sub/", "{tmp}/new/", "{tmp}/new/.", "{tmp}/sub/..", "{graph}/"])
@pytest.mark.parametrize("command", [["partition", "{graph}", "--method", "time", "--out"], ["convert", "{graph}"]])
def test_an_output_that_names_no_file_is_refused_before_any_work(capsys, graph, tmp_path, out, command, monkeypatch):
    """``--out ''`` was skipped in silence; ``--out new/`` wrote the file ``new`` and ``--out g.json/``
    replaced the input ``g.json`` (``realpath`` drops the slash; ``stat`` of ``g.json/`` fails, so
    no same-file match)."""
    (tmp_path / "sub").mkdir()
    _no_loading(monkeypatch)
    before = graph.read_bytes()
    spelled = out.format(tmp=tmp_path, graph=graph)
    refused(capsys, f"cannot write '{spelled}'", *[a.format(graph=graph) for a in command], spelled)
    assert graph.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["g.json", "sub"]
    assert os.listdir(tmp_path / "sub") == []


def _no_loading(monkeypatch) -> None:
    """Fail the test if a command loads its graph (the commands that write: partition, convert)."""
    from devplace_lite.commands import _solve, convert

    for module in (_solve, convert):
        monkeypatch.setattr(module, "load_graph", lambda path: pytest.fail("loaded the graph before refusing the output"))


def test_an_output_in_a_missing_folder_is_refused_before_any_work(capsys, graph, tmp_path, monkeypatch):
    _no_loading(monkeypatch)
    refused(capsys, f"folder {tmp_path / 'none'} does not exist", "partition", graph, "--method", "time",
            "--out", tmp_path / "none" / "a.json")


def test_replaced_file_keeps_its_mode(capsys, graph, tmp_path):
    out = tmp_path / "private.json"
    out.write_text("old")
    out.chmod(0o600)
    assert run(capsys, "partition", graph, "--method", "time", "--out", out)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and json.loads(out.read_text())["method"] == "time"


def test_new_file_gets_the_umask_mode(capsys, graph, tmp_path):
    old = os.umask(0o027)
    try:
        assert run(capsys, "convert", graph, tmp_path / "new.json")[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_symlink_output_is_written_through(capsys, graph, tmp_path):
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "answer.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert run(capsys, "partition", graph, "--method", "time", "--out", link)[0] == 0
    assert link.is_symlink() and json.loads(target.read_text())["method"] == "time"
    assert sorted(os.listdir(tmp_path / "sub")) == ["answer.json"]


@pytest.mark.parametrize("unnamed", [True, False], ids=["O_TMPFILE", "named-temp"])
def test_failed_write_leaves_the_old_file_and_nothing_else(tmp_path, monkeypatch, unnamed):
    if not unnamed:
        monkeypatch.setattr("devplace_lite.files._open_unnamed", lambda folder: None)
    out = tmp_path / "out.json"
    out.write_text("keep me")

    def fail(f):
        f.write(b"half")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        write_atomic(out, fail)
    assert out.read_text() == "keep me" and os.listdir(tmp_path) == ["out.json"]
    write_atomic(out, lambda f: f.write(b"new"))
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


SLOW_WRITE = """
import sys, time
import devplace_lite.files as files
if {named}:
    files._open_unnamed = lambda folder: None
def slow(f):
    f.write(b"partial")
    f.flush()
    print("writing", file=sys.stderr, flush=True)
    time.sleep(60)
real = files._replace
files._replace = lambda target, write: real(target, slow)
from devplace_lite.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig,named", [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGKILL, False)],
                         ids=["SIGTERM-named-temp", "SIGTERM-O_TMPFILE", "SIGKILL-O_TMPFILE"])
def test_signal_mid_write_leaves_nothing(tmp_path, graph, sig, named):
    out = tmp_path / "out" / "g2.json"
    out.parent.mkdir()
    out.write_text("keep me")
    p = subprocess.Popen([sys.executable, "-c", SLOW_WRITE.format(named=named), "convert", str(graph), str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline() == "writing\n"
    if named:
        assert any(n.startswith(".g2.json.") for n in os.listdir(out.parent))  # the visible temp exists
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert os.listdir(out.parent) == ["g2.json"] and out.read_text() == "keep me"
    if sig == signal.SIGTERM:
        assert p.returncode == 143 and err == "devplace: terminated\n"


SLEEPY_METHOD = """
import signal, sys, time
# a child starts with SIGINT ignored when its parent ignores it (POSIX); the test plays a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)
from devplace_lite import methods
def sleepy(graph, cluster, **kw):
    print("solving", file=sys.stderr, flush=True)
    time.sleep(60)
methods.Method.load = lambda self: sleepy
from devplace_lite.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_is_one_line_and_130(tmp_path, graph):
    out = tmp_path / "a.json"
    p = subprocess.Popen([sys.executable, "-c", SLEEPY_METHOD, "partition", str(graph), "--method", "time",
                          "--json", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline() == "solving\n"
    p.send_signal(signal.SIGINT)
    stdout, err = p.communicate(timeout=60)
    assert (p.returncode, stdout, err) == (130, "", "devplace: interrupted\n") and not out.exists()


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`devplace ... --json | head`: the closed pipe is not bad input; no message, status 141."""
    g = tmp_path / "g.json"
    save_graph(generate("layered", 12000, seed=0), g)  # an answer (~210 KB) well beyond a pipe's 64 KiB buffer
    p = subprocess.Popen([sys.executable, "-m", "devplace_lite.cli", "partition", str(g), "--method", "time",
                          "--bound-time", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(1) == b"{"
    p.stdout.close()
    err = p.stderr.read()
    assert (p.wait(timeout=120), err) == (141, b"")


SCIP_READY = """
import sys
import pyscipopt
class Model(pyscipopt.Model):
    def optimize(self):
        print("solving", file=sys.stderr, flush=True)
        return super().optimize()
pyscipopt.Model = Model
from devplace_lite.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ctrl_c_inside_scip_keeps_stdout_clean(tmp_path):
    """SCIP catches SIGINT itself and prints a notice on fd 1: neither may reach --json's stdout."""
    g = tmp_path / "g.json"
    save_graph(generate("layered", 300, seed=1), g)
    p = subprocess.Popen([sys.executable, "-c", SCIP_READY, "partition", str(g), "-k", "5", "--method",
                          "ip-noncontig", "--time-limit", "120", "--bound-time", "0", "--json", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # --quiet: no solver bar
    assert p.stderr.readline() == "solving\n"
    time.sleep(1.0)  # inside SCIP's solve, where SCIP (not Python) catches SIGINT
    p.send_signal(signal.SIGINT)
    stdout, err = p.communicate(timeout=150)
    assert (p.returncode, stdout, err) == (130, "", "devplace: interrupted\n")


def test_solver_output_on_fd1_never_reaches_stdout(capfd, graph):
    """Whatever native code writes on file descriptor 1 while a command runs goes nowhere."""
    def noisy(graph_, cluster, **kw):
        os.write(1, b"pressed CTRL-C 1 times\n")
        from devplace_lite.throughput.baselines import balance_by_time
        return balance_by_time(graph_, cluster, **kw)
    real = methods.Method.load
    methods.Method.load = lambda self: noisy
    try:
        code = main(["partition", str(graph), "--method", "time", "--json", "--bound-time", "0"])
    finally:
        methods.Method.load = real
    out, err = capfd.readouterr()
    assert code == 0 and json.loads(out)["method"] == "time" and "CTRL-C" not in out + err


# -- limits ------------------------------------------------------------------------------------------
class FakeClock:
    """``time.monotonic`` that moves only when a test says: budgets without wall time."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize("method_spends", [0.5, None], ids=["quick-method", "method-uses-its-budget"])
def test_time_limit_covers_the_certifying_bound(capsys, graph, monkeypatch, method_spends):
    """--time-limit T is the command's wall time: the method gets what is left less the bound's
    share (at most a fifth), the bound gets at most --bound-time and never more than the method
    left; a tenth of T (at most 1 s) stays for the answer. Checked on the budgets handed out
    under a clock that moves only when the method says, not on wall time."""
    clock, seen = FakeClock(), {}

    def method(graph_, cluster, *, time_limit, seed):
        from devplace_lite.throughput.baselines import balance_by_time
        seen["method"] = time_limit
        clock.now += (time_limit or 0.0) if method_spends is None else method_spends
        return balance_by_time(graph_, cluster)
    monkeypatch.setattr(cli, "time", clock)
    monkeypatch.setattr(solve, "time", clock)
    monkeypatch.setattr(methods.Method, "load", lambda self: method)
    monkeypatch.setattr(solve, "_raise_bound", lambda res, entry, seconds: seen.update(bound=seconds, split=entry.split))
    assert run(capsys, "partition", graph, "--method", "time", "--time-limit", "10")[0] == 0
    assert seen["split"] == "chain"  # the bound is on the optimum of the splits the method searches
    assert seen["method"] == pytest.approx(9 - 1.8)  # 10 less 1 s for the answer, less min(5, 0.2 * 9)
    if method_spends is None:
        assert seen["bound"] == pytest.approx(1.8 - solve.MIN_SLICE)
        assert clock.now + seen["bound"] <= 9
    else:
        assert seen["bound"] == 5.0
    assert run(capsys, "partition", graph, "--method", "time")[0] == 0
    assert seen == {"method": None, "bound": 5.0, "split": "chain"}


def test_a_certifying_bound_past_its_seconds_is_stopped_and_the_answer_stands(monkeypatch):
    """At 10^6 nodes building the bound's models outlasted --bound-time by 20 s; now an interval
    timer stops it (a bound that would sleep 60 s here: the flag says the timer fired)."""
    import devplace_lite.throughput.bounds.best as best
    from devplace_lite.throughput.baselines import balance_by_time

    monkeypatch.setattr(best, "best_bound", lambda *a, **k: time.sleep(60))
    res = balance_by_time(generate("layered", 30, seed=0), Cluster(3))
    before = res.bound
    solve._raise_bound(res, methods.PARTITION["time"], 0.2)
    assert "stopped after 0.2 s" in res.extra["bound_skipped"] and res.bound == before
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler, None)


def test_a_certifying_bound_stopped_midway_keeps_what_its_finished_steps_proved(monkeypatch):
    """best_bound reports each raised bound; stopped later, the answer keeps the last one."""
    import devplace_lite.throughput.bounds.best as best
    from devplace_lite.throughput.baselines import balance_by_time
    from devplace_lite.throughput.bounds import Bound

    def slow_after_a_step(graph, cluster, *, on_progress, **kw):
        on_progress(Bound(1.25, "best", 0.01, "time_limit", kind="chain"))
        time.sleep(60)

    monkeypatch.setattr(best, "best_bound", slow_after_a_step)
    res = balance_by_time(generate("layered", 30, seed=0), Cluster(3))
    res.bound = None
    solve._raise_bound(res, methods.PARTITION["time"], 0.2)
    assert "stopped after 0.2 s" in res.extra["bound_skipped"] and res.bound == 1.25


def test_best_bound_reports_every_raised_bound_and_ends_no_lower():
    from devplace_lite.throughput.bounds.best import best_bound

    seen = []
    b = best_bound(generate("layered", 40, seed=1), Cluster(4), time_limit=10, on_progress=seen.append)
    assert seen and all(x.bound <= y.bound for x, y in zip(seen, seen[1:]))  # each report raises it
    assert seen[-1].bound <= b.bound + 1e-12 and all(x.status == "time_limit" for x in seen)


def test_help_states_the_bound_time_and_the_whole_command_limit(capsys):
    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "wall seconds for the whole command" in text and "default 5" in text
    assert "fits inside that limit" in text


# -- library-level errors keep their kinds ----------------------------------------------------------
def test_error_kinds():
    with pytest.raises(GraphError):
        read_input("/dev/zero")
    with pytest.raises(UsageError):
        write_atomic("/dev/null", lambda f: None)


def test_a_bound_past_the_time_limit_answers_with_the_node_bound(capsys, graph, monkeypatch):
    """`devplace bound` whose method outlasts --time-limit (models too large to build in time)
    answers with the slowest node at its fastest device, status time_limit, within the limit."""
    monkeypatch.setattr(methods.Method, "load", lambda self: lambda g, c, time_limit, on_progress: time.sleep(60))
    code, out, _ = run(capsys, "bound", graph, "--method", "best", "-k", "2", "--time-limit", "1", "--json")
    answer = json.loads(out)
    g = load_graph(graph)
    assert code == 0 and answer["status"] == "time_limit" and answer["method"] == "node"
    assert answer["bound"] == pytest.approx(float(g.p_acc.max())) and "best was stopped" in answer["stopped"]


def test_a_bound_stopped_after_a_step_answers_with_what_that_step_proved(capsys, graph, monkeypatch):
    from devplace_lite.throughput.bounds import Bound

    def best(g, c, *, time_limit=None, on_progress=None):  # every bound method's signature
        on_progress(Bound(0.75, "best", 0.01, "time_limit", kind="chain", extra={"components": {}}))
        time.sleep(60)

    monkeypatch.setattr(methods.Method, "load", lambda self: best)
    code, out, _ = run(capsys, "bound", graph, "--method", "best", "-k", "2", "--time-limit", "1", "--json")
    answer = json.loads(out)
    assert code == 0 and (answer["status"], answer["method"], answer["bound"]) == ("time_limit", "best", 0.75)
    assert "finished steps proved" in answer["stopped"]


def test_a_bound_method_that_stops_just_past_its_limit_keeps_its_answer(capsys, graph, monkeypatch):
    """A HiGHS child is killed `KILL_GRACE` past its limit; `bound` gave the method all of
    --time-limit, so the command's own stop fired first and exact-mip's bound (313 on BERT-L12,
    k = 6) was lost for the node bound (20). The method now gets the limit less `STOP_GRACE`."""
    from devplace_lite.throughput.bounds import Bound
    from devplace_lite.mip.solve import KILL_GRACE

    def exact(g, c, *, time_limit=None, on_progress=None):  # stops at its limit plus the child's kill grace
        time.sleep(time_limit + KILL_GRACE)
        return Bound(0.75, "exact-mip", time_limit, "time_limit", kind="chain")

    monkeypatch.setattr(methods.Method, "load", lambda self: exact)
    code, out, _ = run(capsys, "bound", graph, "--method", "exact-mip", "-k", "2", "--time-limit", "3", "--json")
    answer = json.loads(out)
    assert code == 0 and (answer["status"], answer["method"], answer["bound"]) == ("time_limit", "exact-mip", 0.75)


@pytest.mark.parametrize("method", ["greedy", "kl", "time", "dp", "ip"])
def test_a_proven_infeasible_answer_states_no_objective_and_says_why(capsys, tmp_path, method):
    """A heuristic's infeasible answer printed the max load of a placement that breaks the cap
    ('objective 6.29, status infeasible'); dp and ip printed null. Every method now answers null
    and the reason names the node that fits nowhere."""
    p = tmp_path / "g.json"
    save_graph(generate("layered", 12, seed=0), p)
    code, out, err = run(capsys, "partition", p, "-k", "3", "--memory", "1", "--method", method, "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["status"] == "infeasible" and ans["objective"] is None and ans["gap"] is None
    assert ans["reason"].startswith("node ") and "fits on no device" in ans["reason"]
