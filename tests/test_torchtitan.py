"""A plan handed to torchtitan (`devplace_lite.pipeline.titan`, ``devplace plan --emit torchtitan``).

torchtitan's own config loader reads the file ``plan --emit torchtitan`` writes, and its own
split function and schedule builder run the stages it names on gloo (``tests/torchtitan_ranks.py``
under torchrun), with losses and every parameter's gradient equal to the unsplit model's: for a
schedule of one stage per rank (1F1B), a looped one (interleaved 1F1B) and a V (ZB-V).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devplace_lite.pipeline.titan import SCHEDULE_NAMES, to_toml, units

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TITAN_LLAMA = "devplace_lite.zoo.external:torchtitan_llama3"


def _plan(tmp_path: Path, model: str, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    job = tmp_path / "job.toml"
    proc = subprocess.run([sys.executable, "-m", "devplace_lite.cli", "plan", model, "-k", "2", "--spec", "H100",
                           "--out", str(tmp_path / "plan"), "--emit", "torchtitan", str(job), "--json", *flags],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    return proc, job


def test_schedule_names_are_torchs():
    from torch.distributed.pipelining.schedules import get_schedule_class

    from devplace_lite.schedules.simulate import SCHEDULES

    assert set(SCHEDULE_NAMES) == set(SCHEDULES)
    for ours, theirs in SCHEDULE_NAMES.items():
        assert get_schedule_class(theirs).__name__ == SCHEDULES[ours].torch_class


def test_units_of_a_hugging_face_causal_lm_are_torchtitans_backend_names():
    from devplace_lite.zoo import load

    model, _ = load("devplace_lite.zoo.external:llama", batch=2, seed=0)
    got = units(model)
    assert [t for t, _ in got] == ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "norm", "output",
                                   "rotary_emb"]
    assert dict(got)["layers.2"] == "model.model.layers.2" and dict(got)["output"] == "model.lm_head"


def test_units_of_a_model_named_as_torchtitan_names_its_own():
    net = torch.nn.Module()
    net.tok_embeddings = torch.nn.Embedding(8, 4)
    net.layers = torch.nn.ModuleDict({"0": torch.nn.Linear(4, 4), "1": torch.nn.Linear(4, 4)})
    net.norm, net.output = torch.nn.LayerNorm(4), torch.nn.Linear(4, 8)
    assert [t for t, _ in units(net)] == ["tok_embeddings", "layers.0", "layers.1", "norm", "output"]


def test_toml_round_trips():
    import tomllib

    config = {"job": {"description": 'a "quoted" plan: ü'}, "parallelism": {"pipeline_parallel_degree": 2,
              "module_fqns_per_model_part": [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]}}
    assert tomllib.loads(to_toml(config, ["a comment"])) == config


@pytest.mark.parametrize("flags, why", [
    (["--emit", "deepspeed", "x.toml"], "--emit deepspeed: unknown format; the one known is torchtitan"),
    (["--emit", "torchtitan", "x.toml", "--inference"], "torchtitan trains"),
])
def test_bad_emit_is_one_line_and_writes_nothing(tmp_path, flags, why):
    proc = subprocess.run([sys.executable, "-m", "devplace_lite.cli", "plan", "gpt", "-k", "2", "--out", "plan",
                           *flags], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and why in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_cut_inside_a_layer_is_refused_before_anything_is_written(tmp_path):
    proc, job = _plan(tmp_path, "devplace_lite.zoo.external:llama", "--granularity", "layer")  # cuts at an MLP
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "inside one of torchtitan's units" in proc.stderr and "--granularity block" in proc.stderr
    assert not job.exists() and not (tmp_path / "plan").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--schedule", "interleaved-1f1b"], ["--schedule", "zbv"]],
                         ids=["1f1b", "interleaved-1f1b", "zbv"])
def test_torchtitan_reads_the_config_and_its_split_runs_the_plan(tmp_path, flags):
    pytest.importorskip("torchtitan", reason="the extra titan (make titan)")
    from torchtitan.config import ConfigManager

    proc, job = _plan(tmp_path, TITAN_LLAMA, *flags)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    parts = answer["emitted"]["module_fqns_per_model_part"]
    assert len(parts) == answer["stages"] and [p[0] for p in parts[1:]] == answer["split_points"]

    config = ConfigManager().parse_args(["--job.config_file", str(job)])
    par = config.parallelism
    assert par.module_fqns_per_model_part == parts
    assert par.pipeline_parallel_degree == answer["ranks"]
    assert par.pipeline_parallel_schedule == SCHEDULE_NAMES[answer["schedule"]]
    assert par.pipeline_parallel_microbatch_size == answer["microbatch"]
    assert config.training.local_batch_size == answer["batch"]

    out = tmp_path / "rank"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                          str(answer["ranks"]), str(ROOT / "tests" / "torchtitan_ranks.py"), str(job), TITAN_LLAMA,
                          str(out)], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(answer["ranks"])]
    assert sorted(s for r in ranks for s in r["stages"]) == list(range(answer["stages"]))
    assert [s for r in ranks for s in r["stages"]] == [s for rank in range(answer["ranks"]) for s, on in
                                                       enumerate(answer["stage_to_rank"]) if on == rank]
    last = [r for r in ranks if r["losses"]]
    assert len(last) == 1 and last[0]["losses"] == answer["microbatches"] and last[0]["loss_diff"] <= 1e-5
    held = [name for r in ranks for name in r["grad_diff"]]
    assert sorted(held) == ranks[0]["parameters"]  # every parameter on exactly one stage
    assert max(d for r in ranks for d in r["grad_diff"].values()) <= 1e-5
