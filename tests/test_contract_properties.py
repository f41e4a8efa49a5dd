"""Property tests of the CLI contract (DESIGN.md, issue 17): for malformed graph files and option
values drawn by hypothesis, every command exits 0 with a valid answer or 2 with one line on
stderr, writes nothing when it refuses, and never accepts what the format or the option's range
forbids (a silent misread).

The commands run in-process (`devplace_lite.cli.main`), so a few hundred examples take seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devplace_lite.cli import main
from devplace_lite.generators import generate
from devplace_lite.io import NATIVE_SCHEMA, graph_to_msr, graph_to_native, load_graph, save_graph

SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

BASE = graph_to_native(generate("layered", 6, seed=0, training=True))
BASE_MSR = graph_to_msr(generate("layered", 6, seed=1))
BASE_MSR.update(maxFPGAs=2, maxCPUs=1)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.sampled_from([0, 1, -1, 2, 10**18, 10**400]) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4) | st.sampled_from(["false", "0", "true", "1", "", "a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4)

plausible = st.sampled_from([0, 1, True, False, 0.5, 3, 2.0, "n1", 7, None])


def call(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_refused_cleanly(code: int, out: str, err: str, folder: Path, inputs: set[str]) -> None:
    assert code == 2, (code, err)
    assert out == "" and err.startswith("devplace: error: ") and err.count("\n") == 1, err
    assert set(os.listdir(folder)) == inputs, "a refused command wrote a file"


# -- malformed graphs -----------------------------------------------------------------------------
@st.composite
def spoiled(draw) -> tuple[dict, bool]:
    """A native or msr graph with one to three fields replaced, removed or added."""
    msr = draw(st.booleans())
    doc = json.loads(json.dumps(BASE_MSR if msr else BASE))
    node_fields = (["id", "supportedOnFpga", "isBackwardNode", "cpuLatency", "fpgaLatency", "size", "colorClass",
                    "name"] if msr else list(NATIVE_SCHEMA))
    top_fields = ["maxFPGAs", "maxCPUs", "maxSizePerFPGA", "nodes", "edges"] if msr else \
        ["version", "name", "defaults", "meta", "nodes", "edges", "extra"]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["node", "node", "node", "top", "edge", "defaults"]))
        value = draw(st.one_of(json_values, plausible))  # plausible values reach the methods more often
        delete = draw(st.integers(0, 4)) == 0
        if where == "node" and isinstance(doc.get("nodes"), list) and doc["nodes"]:
            rec = doc["nodes"][draw(st.integers(0, len(doc["nodes"]) - 1))]
            if isinstance(rec, dict):
                key = draw(st.sampled_from(node_fields + ["unknown"]))
                rec.pop(key, None) if delete else rec.__setitem__(key, value)
        elif where == "edge" and isinstance(doc.get("edges"), list) and doc["edges"]:
            j = draw(st.integers(0, len(doc["edges"]) - 1))
            e = doc["edges"][j]
            if isinstance(e, dict):
                e[draw(st.sampled_from(["sourceId", "destId", "cost", "size"]))] = value
            elif isinstance(e, list) and e:
                e[draw(st.integers(0, len(e) - 1))] = value
            else:
                doc["edges"][j] = value
        elif where == "defaults" and not msr:
            if not isinstance(doc.get("defaults"), dict):
                doc["defaults"] = {}
            doc["defaults"][draw(st.sampled_from(["accelerators", "cpus", "memory", "gpus"]))] = value
        else:
            key = draw(st.sampled_from(top_fields))
            doc.pop(key, None) if delete else doc.__setitem__(key, value)
    return doc, msr


def is_flag(x) -> bool:
    return isinstance(x, bool) or type(x) is int and x in (0, 1)


def is_num(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(float(x)) and x >= 0


def is_id(x) -> bool:
    return isinstance(x, str) and x != "" or type(x) is int


def well_typed_native(doc: dict) -> bool:
    """What docs/graph-format.md allows, field by field (graph-level rules aside)."""
    checks = {"id": is_id, "p_acc": is_num, "p_cpu": lambda x: x is None or is_num(x), "memory": is_num,
              "comm": is_num, "supported": is_flag, "backward": is_flag, "color": lambda x: x is None or is_id(x),
              "name": lambda x: isinstance(x, str), "out_bytes": is_num, "flops": is_num}
    d = doc.get("defaults", {})
    return (set(doc) <= {"format", "version", "name", "units", "defaults", "meta", "nodes", "edges"}
            and isinstance(doc.get("name", ""), str) and isinstance(doc.get("meta", {}), dict)
            and isinstance(d, dict) and set(d) <= {"accelerators", "cpus", "memory"}
            and all(v is None or is_num(v) and (k == "memory" and v > 0 or float(v).is_integer())
                    for k, v in d.items())
            and all(isinstance(v, dict) and "id" in v and "p_acc" in v and set(v) <= set(checks)
                    and all(checks[k](x) for k, x in v.items()) for v in doc["nodes"])
            and all(isinstance(e, list) and len(e) == 2 and all(map(is_id, e)) for e in doc["edges"]))


def well_typed_msr(doc: dict) -> bool:
    return (all(isinstance(v, dict) and is_id(v.get("id")) and is_flag(v.get("supportedOnFpga"))
                and is_flag(v.get("isBackwardNode")) and is_num(v.get("cpuLatency")) and is_num(v.get("fpgaLatency"))
                and is_num(v.get("size", 0)) and (v.get("colorClass") is None or is_id(v["colorClass"]))
                and isinstance(v.get("name", ""), str) for v in doc["nodes"])
            and all(isinstance(e, dict) and is_id(e.get("sourceId")) and is_id(e.get("destId"))
                    and is_num(e.get("cost")) and is_num(e.get("size", 0)) for e in doc["edges"])
            and all(is_num(doc[k]) and float(doc[k]).is_integer() for k in ("maxFPGAs", "maxCPUs") if k in doc)
            and ("maxSizePerFPGA" not in doc or is_num(doc["maxSizePerFPGA"]) and doc["maxSizePerFPGA"] > 0))


@SETTINGS
@given(spoiled())
def test_malformed_graph_is_answered_or_refused_in_one_line(case):
    doc, msr = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = folder / "in.json"
        src.write_text(json.dumps(doc))  # 10**400 is written as digits: the loader must refuse it
        code, out, err = call(["convert", str(src), str(folder / "out.json")])
        event(f"convert exit {code}")
        if code != 0:
            assert_refused_cleanly(code, out, err, folder, {"in.json"})
            return
        # accepted: every field had a documented type, and what was read is what was written
        assert (well_typed_msr if msr else well_typed_native)(doc), doc
        g, back = load_graph(src), load_graph(folder / "out.json")
        assert g.nodes == back.nodes and g.edges == back.edges and g.defaults == back.defaults
        if g.n == 0:
            return  # an empty graph through the methods belongs to the scale half of issue 17
        code, out, err = call(["partition", str(src), "--method", "time", "--bound-time", "0", "--json",
                               "--out", str(folder / "answer.json")])
        if code == 2:
            assert_refused_cleanly(code, out, err, folder, {"in.json", "out.json"})
            return
        assert code == 0, err
        answer = json.loads(out)
        assert answer == json.loads((folder / "answer.json").read_text())
        assert answer["status"] in ("optimal", "feasible", "infeasible", "unknown", "time_limit")


@SETTINGS
@given(st.binary(max_size=40), st.integers(0, 10**6))
def test_spoiled_bytes_are_refused_or_read(noise, at):
    """Bytes inserted anywhere in a valid file (invalid UTF-8, truncation, NUL): never a traceback."""
    text = json.dumps(BASE).encode()
    at %= len(text) + 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "in.json").write_bytes(text[:at] + noise + text[at + len(noise) // 2:])
        code, out, err = call(["info", str(folder / "in.json"), "--json"])
        if code != 0:
            assert_refused_cleanly(code, out, err, folder, {"in.json"})
        else:
            assert json.loads(out)["nodes"] >= 0


# -- option values --------------------------------------------------------------------------------
#: option -> (commands it belongs to, the values it accepts)
RANGES = {
    "accelerators": (("partition", "latency", "bound", "evaluate"), lambda x: float(x).is_integer() and x >= 0),
    "cpus": (("partition", "latency", "bound", "evaluate"), lambda x: float(x).is_integer() and x >= 0),
    "memory": (("partition", "latency", "bound", "evaluate"), lambda x: math.isfinite(x) and x > 0),
    "time-limit": (("partition", "latency", "bound"), lambda x: math.isfinite(x) and 0 < x <= 1e9),
    "seed": (("partition", "latency"), lambda x: float(x).is_integer() and 0 <= x < 2**32),
    "bound-time": (("partition",), lambda x: math.isfinite(x) and 0 <= x <= 1e9),
    "limit": (("info",), lambda x: float(x).is_integer() and 1 <= x <= 10**8),
}

option_values = st.one_of(
    st.floats().map(repr), st.floats(min_value=-1e3, max_value=1e3).map(str),
    st.integers(min_value=-2**70, max_value=2**70).map(str), st.integers(-3, 20).map(str),
    st.sampled_from(["", "nan", "-nan", "inf", "-inf", "1e3", "0x10", "1_0", " 3", "-0", "0", "1e-300", "1e309",
                     "9" * 5000, "abc", "3.0"]),
    st.text(max_size=6))


def numeric(text: str) -> float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("options")
    save_graph(generate("layered", 6, seed=2), folder / "g.json")
    (folder / "p.json").write_text(json.dumps({str(i): "acc0" for i in range(6)}))
    return folder


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(RANGES)), st.data(), option_values)
def test_option_values_are_checked(files, option, data, value):
    commands, ok = RANGES[option]
    command = data.draw(st.sampled_from(commands))
    g = str(files / "g.json")
    argv = {"partition": ["partition", g, "--method", "time", "--bound-time", "0.2"],
            "latency": ["latency", g, "--method", "greedy"],
            "bound": ["bound", g, "-k", "2", "--method", "combinatorial"],
            "evaluate": ["evaluate", g, str(files / "p.json")],
            "info": ["info", g]}[command] + ["--json", f"--{option}={value}"]
    before = set(os.listdir(files))
    code, out, err = call(argv)
    event(f"exit {code}")
    assert set(os.listdir(files)) == before
    x = numeric(value.strip().replace("_", "")) if value.isascii() else None
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("devplace: error: "), err
        if f"--{option}" in err:
            assert "expected" in err and ("in [" in err or "in (" in err or ">" in err)  # the range is said
        return
    assert code == 0, err
    assert x is not None and ok(x), f"--{option}={value!r} was accepted"
    assert isinstance(json.loads(out), dict)
