"""The splits practitioners run by default, reproduced on a model's segments: torchtitan's
(`devplace_lite.pipeline.titan.torchtitan_split`) against the module names torchtitan 0.3.0's
own ``generate_llm_fqn_per_model_part`` returns (recorded from that release, run on this
machine), and the properties any such split must have."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devplace_lite.errors import UsageError
from devplace_lite.pipeline.titan import layer_stack, torchtitan_split


def _names(layers: int) -> list[str]:
    return ["model"] + [f"model.model.layers.{i}" for i in range(layers)] + ["model.lm_head"]


#: (stages, layers, input weight, output weight) -> layers on each stage, as torchtitan 0.3.0 returns them
TORCHTITAN = {
    (2, 3, 2, 2): [2, 1],
    (4, 16, 1, 1): [4, 5, 4, 3],
    (3, 7, 1, 1): [2, 3, 2],
    (8, 16, 1, 1): [2, 3, 2, 2, 2, 2, 2, 1],
    (5, 6, 1, 1): [1, 2, 2, 1, 0],
}


@pytest.mark.parametrize("case", sorted(TORCHTITAN))
def test_torchtitan_split_is_torchtitans(case):
    stages, layers, iw, ow = case
    split = torchtitan_split(_names(layers), stages, iw, ow)
    assert split[0] == 0 and split[-1] == stages - 1  # the embedding first, the head last
    assert [split[1:-1].count(s) for s in range(stages)] == TORCHTITAN[case]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(2, 12), st.integers(1, 3), st.integers(1, 3), st.integers(0, 3))
def test_torchtitan_split_deals_out_every_layer_in_order(layers, stages, iw, ow, extra_front):
    names = [f"embed.{j}x" for j in range(extra_front)] + _names(layers)
    try:
        split = torchtitan_split(names, stages, iw, ow)
    except UsageError as e:
        per = (layers + iw + ow) // stages
        assert per == 0 or iw > per or ow > per, e  # refused only where torchtitan refuses
        return
    assert len(split) == len(names) and split == sorted(split)
    assert set(split) <= set(range(stages)) and split[0] == 0 and split[-1] == stages - 1
    assert layer_stack(names) == list(range(extra_front + 1, extra_front + 1 + layers))


def test_a_model_without_a_stack_of_layers_is_refused_in_one_line():
    with pytest.raises(UsageError, match="stack of layers"):
        torchtitan_split(["conv1", "bn1", "fc"], 2)
