"""`devplace plan` on a practitioner's own model, as a newcomer runs it: a file in the current
folder, torchvision beside a CPU torch, timm, Hugging Face models whose eval output carries a
key-value cache (GPT-2, OPT, T5, BART from small configs, random weights, nothing downloaded),
export's reason first when capture fails, a micro-batch count that fits the batch, the summary
the generated script prints, and no warning on the way. No assertion reads a wall clock."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.errors import GraphError, UsageError  # noqa: E402
from devplace_lite.pipeline.capture import capture, without_cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
needs = {name: pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} is not installed (the "
                                  "models extra)") for name in ("torchvision", "timm", "transformers")}


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A new user's folder as the current folder; the import path and modules are restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name in ("mynet", "ownbatch", "hf_user"):
            del sys.modules[name]


MYNET = '''
import torch
import torchvision


def resnet18(batch: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10).eval(), torch.randn(batch, 3, 32, 32)


def boxes(batch: int = 8, seed: int = 0):
    torchvision.ops.nms(torch.rand(3, 4), torch.rand(3), 0.5)  # a compiled operator of torchvision
    return torch.nn.Linear(4, 4), torch.randn(batch, 4)
'''


@needs["torchvision"]
def test_a_file_in_the_current_folder_that_imports_torchvision_is_planned(user_folder, capsys):
    (user_folder / "mynet.py").write_text(MYNET)
    code, out, err = _cli(capsys, "plan", "mynet:resnet18", "-k", 2, "--inference", "--repeats", 1,
                          "--out", "build/plan")
    assert code == 0, err
    plan = json.loads((user_folder / "build/plan/plan.json").read_text())
    assert plan["model"] == "mynet:resnet18" and plan["capture"] == "torch.export" and plan["stages"] == 2
    assert (user_folder / "build/plan/graph.json").is_file() and (user_folder / "build/plan/run_pipeline.py").is_file()
    # every file written is named, graph.json included
    assert "build/plan/plan.json (the plan), build/plan/graph.json (the segments' graph)" in out


def test_torchvision_operators_that_do_not_load_are_one_line_with_the_fix(user_folder):
    from devplace_lite.zoo import load
    from devplace_lite.zoo.external import torchvision_mismatch

    (user_folder / "mynet.py").write_text(MYNET)
    try:
        torch.ops.torchvision.nms  # noqa: B018 - loaded: a torchvision matching this torch, nothing to explain
        pytest.skip("torchvision's compiled operators load here")
    except (AttributeError, RuntimeError):
        pass
    with pytest.raises(UsageError) as e:
        load("mynet:boxes", batch=2)
    line = str(e.value)
    assert "\n" not in line and line.startswith("model spec mynet:boxes: torchvision ")
    assert "built for CUDA torch" in line and "download.pytorch.org/whl/cpu" in line and "+cpu" in line
    assert torchvision_mismatch(RuntimeError("operator torchvision::nms does not exist")) is not None
    assert torchvision_mismatch(RuntimeError("shape mismatch")) is None


@needs["timm"]
def test_a_timm_model_is_captured_and_planned():
    from devplace_lite.pipeline.planner import plan
    from devplace_lite.zoo import load

    model, x = load("devplace_lite.zoo.external:efficientnet_b0", batch=2)
    p = plan(model, x, k=2, microbatches=2, training=False, repeats=1, warmup=0)
    assert p.capture_how == "torch.export" and p.num_stages == 2 and p.result.status == "optimal"


HF_USER = '''
import torch
import transformers as tr


def _tokens(batch, seq, seed):
    return torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seed))


def gpt2(batch=4, seed=0):
    torch.manual_seed(seed)
    cfg = tr.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=16, bos_token_id=1,
                        eos_token_id=2)
    return tr.GPT2LMHeadModel(cfg).eval(), _tokens(batch, 8, seed)


def opt(batch=4, seed=0):
    torch.manual_seed(seed)
    cfg = tr.OPTConfig(vocab_size=100, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2,
                       max_position_embeddings=16, word_embed_proj_dim=32, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0)
    return tr.OPTForCausalLM(cfg).eval(), _tokens(batch, 8, seed)


def t5(batch=4, seed=0):  # positional inputs: input_ids, attention_mask, decoder_input_ids
    torch.manual_seed(seed)
    cfg = tr.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2)
    x = _tokens(batch, 8, seed)
    return tr.T5ForConditionalGeneration(cfg).eval(), (x, torch.ones_like(x), _tokens(batch, 6, seed + 1))


def bart(batch=4, seed=0):
    torch.manual_seed(seed)
    cfg = tr.BartConfig(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_position_embeddings=16)
    x = _tokens(batch, 8, seed)
    return tr.BartForConditionalGeneration(cfg).eval(), (x, torch.ones_like(x), _tokens(batch, 6, seed + 1))
'''


@needs["transformers"]
@pytest.mark.parametrize("name, cache", [("gpt2", "DynamicCache"), ("opt", "DynamicCache"),
                                         ("t5", "EncoderDecoderCache"), ("bart", "EncoderDecoderCache")])
def test_hugging_face_models_whose_eval_output_carries_a_cache_are_planned_unedited(user_folder, name, cache):
    from devplace_lite.pipeline.planner import plan
    from devplace_lite.zoo import load

    (user_folder / "hf_user.py").write_text(HF_USER)
    model, x = load(f"hf_user:{name}", batch=2)
    with torch.no_grad():  # the model as given returns its key-value cache: what export refused
        assert type(model(*x).past_key_values).__name__ == cache
    p = plan(model, x, k=2, microbatches=2, repeats=1, warmup=0)
    assert p.capture_how == "torch.export" and p.num_stages == 2 and p.result.status == "optimal"
    assert p.notes[0].startswith("use_cache turned off in the config of ")
    assert p.tied  # the LM head shares the token embedding's weight
    assert without_cache(model) == []  # already off: nothing turned twice


@needs["transformers"]
def test_an_unedited_encoder_decoder_runs_under_torchrun_equal_to_the_unsplit_model(user_folder, capsys, monkeypatch):
    """T5 as Hugging Face ships it (a Seq2SeqLMOutput with a cache, not a tensor): the ranks
    import hf_user.py from the current folder, train on the logits, and match the model."""
    (user_folder / "hf_user.py").write_text(HF_USER)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # torchrun's ranks import this checkout's library
    code, out, err = _cli(capsys, "plan", "hf_user:t5", "-k", 2, "--repeats", 1, "--out", "p",
                          "--run", "--check", "--steps", 1, "--json")
    assert code == 0, err
    check = json.loads(out)["run"]["check"]
    assert check["outputs_allclose"] and check["grads_allclose"] and check["parameters_checked"] > 0, check


class OwnBranch(torch.nn.Module):
    """Data-dependent control flow in the model's own forward: export and fx both fail."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.b(self.a(x))
        return self.a(x)


def test_when_capture_fails_export_s_reason_comes_first_then_the_fallback_s():
    with pytest.raises(GraphError) as e:
        capture(OwnBranch(), (torch.ones(2, 4),))
    line = str(e.value)
    assert "\n" not in line and line.startswith("cannot capture OwnBranch: torch.export fails at test_plan_user.py:")
    assert line.index("torch.export fails") < line.index("the torch.fx fallback: torch.fx fails in the model's own")


OWN_BATCH = '''
import torch


def build(seed=0):  # no batch= parameter: the function keeps its own batch of 2
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)), torch.randn(2, 4)
'''


def test_default_microbatches_fit_the_batch_and_a_given_count_that_does_not_names_both_options(user_folder, capsys):
    from devplace_lite.pipeline.planner import default_microbatches

    assert [default_microbatches(b) for b in (1, 2, 3, 4, 6, 7, 8, 12)] == [1, 2, 3, 4, 3, 1, 4, 4]
    (user_folder / "ownbatch.py").write_text(OWN_BATCH)
    code, out, err = _cli(capsys, "plan", "ownbatch:build", "-k", 2, "--repeats", 1, "--out", "p", "--json")
    assert code == 0, err
    assert json.loads(out)["microbatches"] == 2
    assert "2 micro-batch(es), the most up to 4 that divide the batch of 2" in json.loads(out)["notes"][0]
    code, out, err = _cli(capsys, "plan", "ownbatch:build", "-k", 2, "--microbatches", 4, "--out", "q")
    assert code == 2 and err.count("\n") == 1 and "--microbatches" in err and "--batch" in err, err
    code, out, err = _cli(capsys, "plan", "ownbatch:build", "-k", 2, "--batch", 6, "--repeats", 1, "--out", "r",
                          "--json")  # --batch alone: the function keeps its 2, the count follows it
    assert code == 0 and json.loads(out)["microbatches"] == 2, err


def test_the_generated_script_prints_step_time_loss_and_where_the_json_went(user_folder):
    """One stage under torchrun, started in the user's folder (the rank imports ownbatch.py from
    there): what a user sees after `torchrun ... run_pipeline.py`."""
    from devplace_lite.pipeline.planner import plan
    from devplace_lite.pipeline.torchrun import torchrun_commands
    from devplace_lite.zoo import load

    (user_folder / "ownbatch.py").write_text(OWN_BATCH)
    model, x = load("ownbatch:build")
    p = plan(model, x, k=1, microbatches=2, repeats=1, warmup=0, model_spec="ownbatch:build")
    paths = p.write("plan")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    (cmd,) = torchrun_commands(paths["script"], 1, extra=["--steps", "2"])  # torchrun on a free loopback port
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=user_folder, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("run_pipeline: "))
    assert "1 stages, 1f1b, 2 micro-batches of 1: step " in line and " ms wall (median of 2" in line
    assert ", loss " in line and "per-rank JSON in plan/run/rank0.json" in line
    assert (user_folder / "plan" / "run" / "rank0.json").is_file()
    assert "Warning" not in run.stderr, run.stderr[-2000:]  # torch's, on a loss that requires grad made a float


@needs["transformers"]
def test_plan_of_the_book_s_hugging_face_model_prints_no_warning(tmp_path):
    """torch's LeafSpec FutureWarning, tqdm's IProgress warning and transformers' bos/eos lines
    were printed on every plan of the book's GPT-2; a fresh process sees every warning once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default", "OMP_NUM_THREADS": "1"}
    code = "import sys; from devplace_lite.cli import main; sys.exit(main())"
    run = subprocess.run([sys.executable, "-c", code, "plan", "devplace_lite.zoo.external:gpt2", "-k", "2",
                          "--inference", "--repeats", "1", "--out", str(tmp_path / "p")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr == "", run.stderr[-2000:]


def test_the_help_shows_module_function_examples(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "devplace plan mynet:build -k 2" in out and "the current folder" in out
    flat = " ".join(out.split())
    assert "(default ./devplace-plan)" in flat and "--all-ranks" in flat  # where the files go unasked
    assert textwrap.dedent(out).count("module:function") >= 2


@pytest.mark.parametrize("flags, options", [
    ([], {}),
    (["--schedule", "auto"], {"schedule": "auto"}),
], ids=["defaults", "schedule-auto"])
def test_the_library_and_the_command_line_give_the_same_plan(user_folder, capsys, flags, options):
    """`dl.plan` and `devplace plan` choose alike (issue 41): the micro-batches when none are
    asked (a batch of 6: 3, and a note), the schedule search of ``auto``, the split, its bound
    and status; timed by a roofline, so both measure the same."""
    import devplace_lite as dl
    from devplace_lite.zoo import load

    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--batch", 6, "--spec", "H100", "--out", "p", "--json",
                          *flags)
    assert code == 0, err
    cli = json.loads(out)
    model, inputs = load("gpt", batch=6, seed=0)
    lib = dl.plan(model, inputs, k=2, spec="H100", model_spec="gpt", **options).to_json()
    for key in ("microbatches", "schedule", "split_points", "status", "objective_ms", "bound_ms", "gap", "notes",
                "ranks", "stage_to_rank"):
        assert lib[key] == cli[key], key
    assert lib["microbatches"] == 3 and "the most up to 4 that divide the batch of 6" in lib["notes"][0]
    assert ("schedule_auto" in lib) == ("schedule_auto" in cli) == bool(options)
    if options:
        assert [t.get("step_ms") for t in lib["schedule_auto"]] == [t.get("step_ms") for t in cli["schedule_auto"]]
