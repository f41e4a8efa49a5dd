"""A decoder's repeated layers captured once (`pipeline.repeat`): the profile made from a cut
model equals the whole model's, segment by segment, and plans the same (issue 41, item 5)."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")
from devplace_lite.pipeline import mesh_plan  # noqa: E402
from devplace_lite.zoo.external import meta_lm  # noqa: E402

repeat = importlib.import_module("devplace_lite.pipeline.repeat")
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=7, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _profiles(monkeypatch, config: str, model: str, **extra):
    """(whole capture's profile, the cut path's profile) of one meta-device decoder."""
    def build():
        return meta_lm(config, model, 4, 16, **{**TINY, **extra})

    m, x = build()
    fast = mesh_plan.mesh_profile(m, x, microbatches=4, spec="H100")
    with monkeypatch.context() as mp:
        mp.setattr(repeat, "find_stack", lambda _m: None)  # the whole model captured
        m, x = build()
        slow = mesh_plan.mesh_profile(m, x, microbatches=4, spec="H100")
    return slow, fast


@pytest.mark.parametrize("config,model,extra", [
    ("LlamaConfig", "LlamaForCausalLM", {}),
    ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
])
def test_the_cut_capture_gives_the_whole_models_segment_graph_and_plan(monkeypatch, config, model, extra):
    (g1, s1, t1, c1, _), (g2, s2, t2, c2, _) = _profiles(monkeypatch, config, model, **extra)
    assert c1.repeated is None and c2.repeated is not None  # the fast path was taken
    assert c2.repeated.stack.count == 7 and len(c2.repeated.names) < len(c1.names)
    assert c1.names == c2.names and c1.how == c2.how and c1.tied == c2.tied
    assert g1.nodes == g2.nodes and g1.edges == g2.edges and g1.meta == g2.meta  # costs, memory, edges, notes
    assert s1 == s2
    assert t1.degrees() == t2.degrees() and len(t1.groups) == len(t2.groups)
    assert [(g.column, g.row, g.sizes, g.kind, g.flops, g.row_output_bytes, g.shared) for g in t1.groups] == \
        [(g.column, g.row, g.sizes, g.kind, g.flops, g.row_output_bytes, g.shared) for g in t2.groups]
    for memory in (None, 2 ** 30):
        p1, p2 = (mesh_plan.plan_mesh(g, s, devices=8, degrees=t.degrees(), microbatches=4, batch=4, memory=memory,
                                      spec="H100") for g, s, t in ((g1, s1, t1), (g2, s2, t2)))
        assert (p1.dp, p1.tp, p1.stage_of, p1.mesh) == (p2.dp, p2.tp, p2.stage_of, p2.mesh)


def test_layers_that_run_different_programs_are_captured_whole():
    """Gemma 2 alternates sliding-window and global attention: same parameters, different
    masks read per layer. The fingerprint tells them apart and the whole model is captured."""
    m, x = meta_lm("Gemma2Config", "Gemma2ForCausalLM", 2, 16, **{**TINY, "head_dim": 16, "sliding_window": 8,
                                                                   "query_pre_attn_scalar": 16})
    stack = repeat.find_stack(m)
    assert stack is not None and stack.count == 7  # one structure: only the program tells them apart
    assert not repeat._same_program(m, x, stack)
    assert repeat.capture_repeated(m, x).repeated is None


class _Layer(nn.Module):
    def __init__(self, scale: bool) -> None:
        super().__init__()
        self.lin, self.scale = nn.Linear(8, 8), scale

    def forward(self, h):
        h = self.lin(h)
        return h * 2 if self.scale else h


def test_a_layer_whose_code_differs_is_told_apart():
    """One layer of seven multiplies its output: the same parameters, one more operator."""
    with torch.device("meta"):
        net = nn.Sequential(nn.Linear(8, 8), nn.Sequential(*[_Layer(k == 4) for k in range(7)]))
        net[1] = nn.ModuleList(list(net[1]))
    x = torch.zeros(2, 8, device="meta")

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.layers = net[0], net[1]

        def forward(self, h):
            h = self.inp(h)
            for layer in self.layers:
                h = layer(h)
            return h

    model = Net()
    stack = repeat.find_stack(model)
    assert stack == repeat.Stack("layers", 7)
    assert not repeat._same_program(model, (x,), stack)
    for layer in model.layers:
        layer.scale = False
    assert repeat._same_program(model, (x,), stack)


def test_a_stack_with_shared_parameters_is_not_cut():
    """ALBERT-style: one layer repeated (its parameters tied across the stack)."""
    one = nn.Linear(4, 4)
    assert repeat.find_stack(nn.Sequential(nn.ModuleList([one] * 6))) is None
    assert repeat.find_stack(nn.Sequential(nn.ModuleList([nn.Linear(4, 4) for _ in range(6)]))) is not None
