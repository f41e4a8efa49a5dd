"""`devplace parallelize`'s door: Piper's format shown by a shipped example, placement graphs
converted for a named GPU, and any other file refused in one line that names both formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devplace_lite.devices import SPECS
from devplace_lite.errors import GraphError, UsageError
from devplace_lite.multidim import EXAMPLE, load_model
from devplace_lite.solve import parallelize
from devplace_lite.multidim.convert import DP_BANDWIDTH, TP_BANDWIDTH, from_graph
from test_parallelize import _cli

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "data" / "graphs" / "bert_layer_training.json"


def test_the_shipped_example_is_what_convert_makes(tmp_path, capsys):
    out = tmp_path / "example.json"
    code, _, _ = _cli(["convert", str(GRAPH), str(out), "--to", "piper", "--spec", "V100", "-k", "64"], capsys)
    assert code == 0 and out.read_bytes() == (ROOT / EXAMPLE).read_bytes()
    assert EXAMPLE in (ROOT / "devplace_lite" / "commands" / "parallelize.py").read_text()


def test_a_placement_graph_plans_as_its_piper_file_does():
    direct = parallelize(GRAPH, devices=64, spec="V100")
    via_file = parallelize(ROOT / EXAMPLE)
    assert direct.status == via_file.status == "optimal"
    assert direct.objective == pytest.approx(via_file.objective, rel=1e-12)


@pytest.mark.parametrize("name", ["V100", "A100", "H100", "H200"])
def test_a_spec_gives_its_memory_and_links(name):
    spec = SPECS[name]
    inside = load_model(GRAPH, spec=name, devices=spec.node)
    across = load_model(GRAPH, spec=name, devices=4 * spec.node)
    assert inside.memory == across.memory == spec.memory
    assert inside.bandwidth == spec.nvlink and across.bandwidth == spec.network < spec.nvlink
    assert inside.extra["tp_bandwidth"] == spec.nvlink and inside.extra["spec"] == name


def test_without_a_spec_the_links_are_converts_defaults():
    m = from_graph(GRAPH)
    assert m.bandwidth == DP_BANDWIDTH and m.extra["tp_bandwidth"] == TP_BANDWIDTH and m.extra["spec"] is None


def test_a_file_of_neither_format_names_both(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"layers": [1, 2, 3]}))
    with pytest.raises(GraphError, match="neither Piper's input format .*maxDevices.* nor a placement graph"):
        load_model(other)
    code, out, err = _cli(["parallelize", str(other), "-q"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and EXAMPLE in err


def test_a_piper_file_with_a_bad_field_says_which_format(tmp_path):
    d = json.loads((ROOT / EXAMPLE).read_text())
    del d["bandwidth"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(GraphError, match="Piper's input format: missing field 'bandwidth'"):
        load_model(bad)


def test_a_spec_with_a_piper_file_is_refused(capsys):
    with pytest.raises(UsageError, match="Piper's format, which carries its own cluster"):
        load_model(ROOT / EXAMPLE, spec="H100")
    code, _, err = _cli(["parallelize", str(ROOT / EXAMPLE), "--spec", "H100", "-q"], capsys)
    assert code == 2 and err.count("\n") == 1


def test_convert_takes_spec_only_for_piper(tmp_path, capsys):
    code, _, err = _cli(["convert", str(GRAPH), str(tmp_path / "g.json"), "--spec", "H100"], capsys)
    assert code == 2 and "--to piper" in err and not (tmp_path / "g.json").exists()
