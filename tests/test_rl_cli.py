"""``devplace place-rl train|place``: the JSON contract and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.cost import evaluate  # noqa: E402
from devplace_lite.devices import Cluster  # noqa: E402
from devplace_lite.generators import layered  # noqa: E402
from devplace_lite.io import save_graph  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("placerl")
    ckpt = d / "p.pt"
    assert main(["place-rl", "train", "--family", "layered", "--sizes", "6", "8", "--graphs", "4", "-k", "2",
                 "--episodes", "16", "--batch", "4", "--hidden", "8", "--quiet", "--out", str(ckpt)]) == 0
    graph = d / "g.json"
    save_graph(layered(9, seed=3), graph)
    return ckpt, graph


def test_place_json_contract(files, capsys):
    ckpt, graph = files
    capsys.readouterr()
    assert main(["place-rl", "place", str(graph), "--checkpoint", str(ckpt), "--samples", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("objective", "status", "bound", "seconds", "placement", "simulated_runtime", "sim_calls"):
        assert key in out
    g = layered(9, seed=3)
    assert set(out["placement"]) == set(g.ids) and set(out["placement"].values()) <= {"acc0", "acc1"}
    ev = evaluate(g, Cluster(accelerators=2), out["placement"])
    assert out["objective"] == pytest.approx(ev.max_load) and out["status"] == "feasible"
    assert out["simulated_runtime"] <= out["initial_runtime"] and out["episodes"] == 3


@pytest.mark.parametrize("extra, message", [
    (["--checkpoint", "nowhere.pt"], "does not exist"),
    (["-k", "3"], "places on 2 devices"),
])
def test_place_errors_are_one_line(files, capsys, extra, message):
    ckpt, graph = files
    args = ["place-rl", "place", str(graph), "--checkpoint", str(ckpt)] + extra
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_train_rejects_bad_family(tmp_path, capsys):
    assert main(["place-rl", "train", "--family", "nope", "--out", str(tmp_path / "x.pt"), "--quiet"]) == 2
    assert "unknown graph family" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_plugin_does_not_import_torch_until_run():
    code = "import sys, devplace_lite.commands.place_rl; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
