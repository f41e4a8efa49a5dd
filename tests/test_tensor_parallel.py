"""Tensor parallelism found on models nobody here wrote, priced, and run on torch's engines (issue 41, items 2-3).

The column-then-row groups are recognised on the exported graph of each Hugging Face family
(`pipeline.tensor_parallel.find`), refused in one line where the graph forbids a plain split;
their cost per degree comes from a GPU's roofline (`pipeline.tp_cost`); and dp x pp x tp =
2 x 2 x 2 processes (gloo) train three decoder families with torch's DeviceMesh,
parallelize_module, DDP and pipelining, every output and gradient equal to the unsplit model's.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from devplace_lite.devices import SPECS  # noqa: E402
from devplace_lite.errors import UsageError  # noqa: E402
from devplace_lite.pipeline.capture import exported_graph, fx_split, without_cache  # noqa: E402
from devplace_lite.pipeline.mesh_run import even_points, launch  # noqa: E402
from devplace_lite.pipeline.tensor_parallel import Refused, find, prepare  # noqa: E402
from devplace_lite.pipeline.tp_cost import allreduce_ms, degree_costs, group_cost  # noqa: E402
from devplace_lite.zoo import external  # noqa: E402

#: family -> (kinds of the groups of its first layer, allowed degrees, a refusal's words or None).
#: The tiny configs have 4 query heads and 2 key-value heads (BERT, OPT: 4 heads, no grouping).
EXPECTED = {
    "llama": ({"attention", "mlp"}, [1, 2], None),
    "qwen2": ({"attention", "mlp"}, [1, 2], None),
    "qwen3": ({"attention", "mlp"}, [1, 2], None),
    "mistral": ({"attention", "mlp"}, [1, 2], None),
    "gemma2": ({"attention", "mlp"}, [1, 2], None),
    "gemma3": ({"attention", "mlp"}, [1, 2], None),
    "stablelm": ({"attention", "mlp"}, [1, 2], None),
    "gpt_neox": ({"attention", "mlp"}, [1, 2, 4], None),  # fused query_key_value, interleaved by head
    "falcon": ({"attention", "mlp"}, [1, 2], None),  # fused, grouped by key-value head
    "phi3": (set(), [1], "takes part of the split dimension"),  # fused qkv_proj stacked q|k|v
    "olmo2": ({"mlp"}, [1, 2, 4, 8, 16, 32, 64, 128], "reduces over the split dimension"),  # norm over all heads
    "mixtral": ({"attention"}, [1, 2], "normalises over the split dimension"),  # the router
    "qwen3_moe": ({"attention"}, [1, 2], "normalises over the split dimension"),
    "mamba": (set(), [1], "cuts the split dimension into parts"),
    "bert": ({"attention", "mlp"}, [1, 2, 4], None),
    "opt": ({"attention", "mlp"}, [1, 2, 4], None),
    "gpt2": ({"mlp"}, None, "cuts the split dimension into parts"),  # c_attn: q|k|v stacked
    "t5": ({"mlp"}, None, "unsplit tensor of full width"),  # the relative position bias over all heads
}


def _graph(name: str, batch: int = 2):
    build = external.get(name)
    model, x = build(batch=batch, layers=1) if name in external.DECODERS else build(batch=batch)
    without_cache(model)
    return model, x, exported_graph(model, x)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_groups_found_on_each_family(name):
    kinds, degrees, refusal = EXPECTED[name]
    model, x, gm = _graph(name)
    tp = find(gm)
    first = [g for g in tp.groups if any(".0." in m for m in g.column)]
    assert {g.kind for g in first} == kinds, tp.groups
    if degrees is not None:
        assert tp.degrees()[: len(degrees)] == degrees and len(tp.degrees()) == len(degrees)
    if refusal is not None:
        assert any(refusal in why for _, why in tp.refused), tp.refused
    styles = tp.styles()
    modules = dict(model.named_modules())
    for g in tp.groups:  # each column module's output features are what its row partner reads
        col, row = modules[g.column[0]], modules[g.row[0]]
        assert styles[g.column[0]] == "colwise" and styles[g.row[0]] == "rowwise"
        out_features = col.weight.shape[0] if isinstance(col, torch.nn.Linear) else col.weight.shape[-1]
        in_features = row.weight.shape[1] if isinstance(row, torch.nn.Linear) else row.weight.shape[0]
        assert g.kind == "attention" or out_features == in_features
    assert all(not m.endswith("lm_head") for m in styles)  # the head's output leaves the graph whole


@pytest.mark.parametrize("name", ["llama", "gpt_neox", "falcon", "bert"])
def test_prepared_graph_computes_the_model_and_splits_into_stages(name):
    """`prepare` (module calls for the products, -1 at each split dimension) keeps the function;
    devplace's splitter still cuts it."""
    model, x, gm = _graph(name)
    ref = model(*x)
    tp = find(gm)
    prepare(gm, tp)
    calls = {str(n.target) for n in gm.graph.nodes if n.op == "call_module"}
    assert set(tp.styles()) <= calls
    assert torch.allclose(gm(*x), ref, atol=1e-6)
    if name in external.DECODERS:
        model2, x2 = external.get(name)(batch=2, layers=2)
        without_cache(model2)
        gm2 = exported_graph(model2, x2)
        split, _ = fx_split(prepare(gm2, find(gm2)), x2, even_points(model2, 2), replicate_parameters=True)
        assert torch.allclose(split.run_sequential(*x2), model2(*x2), atol=1e-6)


def test_grouped_query_heads_bound_the_degree():
    _, _, gm = _graph("llama")
    tp = find(gm)
    attention = next(g for g in tp.groups if g.kind == "attention")
    assert {2, 4} <= attention.sizes  # key-value heads and query heads
    assert tp.why_not(2) is None
    assert "does not divide 2" in tp.why_not(4) and "key-value" in tp.why_not(4)
    assert "positive integer" in tp.why_not(0)


def test_refusals_on_hand_written_blocks():
    """A norm over the whole split width, and the residual stream added to split features."""
    class NormedMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            h = self.up(x)
            return self.down(h / h.pow(2).mean(-1, keepdim=True).sqrt())

    class Skip(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.b(self.a(x) + x)

    x = (torch.randn(2, 3, 8),)
    normed = find(exported_graph(NormedMLP(), x))
    assert not normed.groups and "reduces over the split dimension" in normed.refused[0][1]
    skip = find(exported_graph(Skip(), x))
    assert not skip.groups and "unsplit tensor of full width" in skip.refused[0][1]
    assert "no column-then-row pair" in skip.why_not(2)


def test_conv1d_pairs_are_found_but_not_prepared():
    _, _, gm = _graph("gpt2")
    tp = find(gm)
    assert tp.styles()["model.transformer.h.0.mlp.c_fc"] == "colwise"
    with pytest.raises(Refused, match="Conv1D"):
        prepare(gm, tp)


def test_cost_per_degree_on_a_llama_3_8b_layer_captured_on_the_meta_device():
    """One Llama-3-8B layer (32 heads, 8 key-value heads, MLP 14,336, 2,048 tokens), no weights
    allocated: the compute of one device falls with t, never below 1/t of t = 1's (the replicated
    input is read whole); the all-reduces grow with t; 8 key-value heads allow t <= 8."""
    pytest.importorskip("transformers")
    with contextlib.suppress(UsageError):  # transformers imports torchvision, whose operators a CPU torch lacks
        external.import_torchvision()
    import transformers as tr

    cfg = tr.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=1, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, use_cache=False)
    cfg._attn_implementation = "eager"
    with torch.device("meta"):
        model = external.LogitsOf(tr.LlamaForCausalLM(cfg), ("input_ids",))
        x = (torch.zeros(1, 2048, dtype=torch.long),)
    gm = exported_graph(model, x)
    tp = find(gm)
    assert tp.degrees() == [1, 2, 4, 8] and "does not divide 8" in tp.why_not(16)
    rows = degree_costs(gm, tp, SPECS["H100"])  # within one 8-GPU node: NVLink, 450 GB/s
    compute = [r["compute_ms"] for r in rows]
    assert all(a > b for a, b in zip(compute, compute[1:]))
    assert all(c >= compute[0] / r["t"] for c, r in zip(compute, rows))
    assert rows[0]["comm_ms"] == 0 and all(a["comm_ms"] < b["comm_ms"] for a, b in zip(rows[1:], rows[2:]))
    mlp = next(g for g in tp.groups if g.kind == "mlp")
    # the MLP's forward: 3 products of 4,096 x 14,336 over 2,048 tokens, 2 FLOPs a multiply-add
    assert mlp.flops == pytest.approx(3 * 2 * 2048 * 4096 * 14336, rel=1e-3)
    # its all-reduces in training: the row output and the column input's gradient, 2,048 x 4,096 floats each
    assert group_cost(gm, mlp, 2, SPECS["H100"])["comm_ms"] == pytest.approx(
        2 * allreduce_ms(2048 * 4096 * 4, 2, 450e9))
    with pytest.raises(ValueError, match="does not divide"):
        degree_costs(gm, tp, SPECS["H100"], degrees=[3])


def test_run_refuses_a_degree_the_model_does_not_allow_before_starting_processes():
    with pytest.raises(UsageError, match="does not divide 2"):
        launch("devplace_lite.zoo.external:llama", dp=1, pp=1, tp=4)
    with pytest.raises(UsageError, match="micro-batches"):
        launch("devplace_lite.zoo.external:llama", dp=1, pp=2, tp=1, microbatches=1)
    with pytest.raises(UsageError, match="one stage a rank"):
        launch("devplace_lite.zoo.external:llama", dp=1, pp=2, tp=1, schedule="zbv")
    with pytest.raises(UsageError, match="1 split point"):
        launch("devplace_lite.zoo.external:llama", dp=1, pp=2, tp=1, points=[])
    with pytest.raises(UsageError, match="Conv1D"):  # GPT-2's MLP pairs are found, but torch's styles split nn.Linear
        launch("devplace_lite.zoo.external:gpt2", dp=1, pp=1, tp=2)
    with pytest.raises(UsageError, match="no column-then-row pair found.*stacked"):  # Phi-3: fused, stacked
        launch("devplace_lite.zoo.external:phi3", dp=1, pp=1, tp=2)


@pytest.mark.slow
@pytest.mark.parametrize("name, sharded", [("llama", 28), ("qwen2", 40), ("qwen3", 28)])
def test_dp2_pp2_tp2_on_eight_processes_equals_the_unsplit_model(name, sharded):
    """8 gloo processes: 2 replicas (DDP) x 2 stages (1F1B, 2 micro-batches) x 2 tensor shards.
    Llama: grouped-query attention; Qwen2: biased query, key and value projections (split too) and
    a head tied to the token embedding on the other stage (gradients summed over the stages);
    Qwen3: per-head query and key norms inside the split region (gradients summed over the shards)."""
    run = launch(f"devplace_lite.zoo.external:{name}", dp=2, pp=2, tp=2, check=True, timeout=1500)
    check = run["check"]
    assert check["passed"], check
    model = external.get(name)(batch=4)[0]
    assert check["parameters_checked"] == sum(1 for _ in model.named_parameters(remove_duplicate=False))
    assert check["sharded_checked"] == sharded  # 4 layers x 7 column or row weights (and Qwen2's 3 biases)
    assert {tuple(r["coords"]) for r in run["ranks"]} == {(d, p, k) for d in (0, 1) for p in (0, 1) for k in (0, 1)}
    assert all(r["backend"] == "gloo" and len(r["tp_modules"]) == 14 for r in run["ranks"])


@pytest.mark.slow
@pytest.mark.parametrize("name, sharded", [("gpt_neox", 24), ("falcon", 16)])
def test_fused_projections_grouped_by_head_split_on_two_processes(name, sharded):
    """GPT-NeoX's and Falcon's query_key_value are split by plain ColwiseParallel: their output
    features are grouped by head (Falcon: by key-value head); Falcon also adds its MLP's output
    to its attention's in place, which `prepare` makes out-of-place."""
    run = launch(f"devplace_lite.zoo.external:{name}", dp=1, pp=1, tp=2, check=True, timeout=900)
    assert run["check"]["passed"], run["check"]
    assert run["check"]["sharded_checked"] == sharded  # 4 layers x 4 column or row weights (GPT-NeoX: 2 column biases)


@pytest.mark.slow
def test_a_plans_split_points_under_gpipe_with_a_tied_head_and_per_head_norms():
    """Gemma 3 on pp x tp = 2 x 2: its split point as a plan gives it, GPipe, a head tied to the
    embedding on the other stage, query and key norms read as 1 + w inside the split region."""
    run = launch("devplace_lite.zoo.external:gemma3", dp=1, pp=2, tp=2, points=["model.model.layers.1"],
                 schedule="gpipe", check=True, timeout=900)
    assert run["check"]["passed"], run["check"]


def _tiny_llama(device: str):
    """A tiny Llama called with tokens and an attention mask (which spares a meta run Hugging
    Face's data-dependent check of packed sequences), on ``device``."""
    import transformers as tr

    cfg = tr.LlamaConfig(**external._DECODER, use_cache=False)
    cfg._attn_implementation = "eager"
    with torch.device(device):
        torch.manual_seed(0)
        model = external.LogitsOf(tr.LlamaForCausalLM(cfg), ("input_ids", "attention_mask"))
        return model, (torch.zeros(4, 16, dtype=torch.long), torch.ones(4, 16, dtype=torch.long))


def test_a_model_on_the_meta_device_is_timed_by_a_roofline_as_on_the_cpu():
    """No weights allocated, the same roofline times and bytes per segment (chapter 09 plans
    Llama-3-8B so); its example stays on the meta device."""
    pytest.importorskip("transformers")
    from devplace_lite.pipeline.planner import segment_profile

    with contextlib.suppress(UsageError):
        external.import_torchvision()
    got = [segment_profile(*_tiny_llama(d), 2, spec="H100")[0].meta["segments"] for d in ("cpu", "meta")]
    for key in ("forward_ms", "backward_ms", "param_bytes", "grad_bytes", "activation_bytes", "output_bytes"):
        assert got[0][key] == got[1][key], key


def test_no_fitting_mesh_is_not_blamed_on_a_time_limit(monkeypatch):
    """Shapes whose split search found nothing that fits, unproven, are said to be so (there was
    no time limit to blame)."""
    pytest.importorskip("transformers")
    import dataclasses

    import devplace_lite as dl
    from devplace_lite.errors import GraphError
    from devplace_lite.schedules import search as searching

    real = searching.search

    def nothing_fits(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), stage_of=None, simulation=None, status="unknown")

    monkeypatch.setattr(searching, "search", nothing_fits)
    model, x = external.llama()
    with pytest.raises(GraphError, match=r"was found to fit 1 bytes per device: 0 of 3 shape\(s\) proven not to"):
        dl.plan(model, x, devices=8, degrees={"tp": 2}, memory=1)
