"""torchtitan: its default split of a decoder LM, and a plan handed to it as a job config.

Problem
-------
torchtitan (PyTorch's trainer for LLMs) builds pipeline stages by module name: each stage is a
copy of the model that keeps the top-level modules it names (``tok_embeddings``, ``norm``,
``output``) and the entries of the stack of layers it names (``layers.3``), and drops the rest
(``pipeline_module_split``). Unless told otherwise it deals the layers out evenly, weighing the
embedding and the output head as one layer each (``generate_llm_fqn_per_model_part``). Two
things follow:

* `torchtitan_split` is that default split on a plan's segments, the baseline a torchtitan user
  runs (`devplace_lite.pipeline.baseline_splits.with_stages` scores it like any split);
* `job_config` turns a plan into torchtitan's job config (TOML, the format its
  ``ConfigManager`` reads with ``--job.config_file``): the pipeline degree, the schedule, the
  micro-batch size and ``module_fqns_per_model_part``, the module names of each stage, so that
  torchtitan builds the plan's stages with its own split function (``devplace plan ... --emit
  torchtitan FILE``).

Names
-----
A stage is a list of *units*: torchtitan's names for the modules it keeps or drops whole.
For torchtitan's own models (Llama 3, Qwen 3, DeepSeek-V3 ...) the units are the model's
top-level modules, a stack of layers counted entry by entry, and the plan's segment names are
already theirs. A Hugging Face ``...ForCausalLM`` (also inside a wrapper, as the zoo's are) is
named as torchtitan's Hugging Face backend names it (``HFTransformerModel``):
``model.embed_tokens`` is ``tok_embeddings``, ``model.layers.N`` is ``layers.N``, ``model.norm``
is ``norm``, ``lm_head`` is ``output``, and ``model.rotary_emb``, which every layer reads, is
``rotary_emb`` on every stage. A plan can be handed over when every stage begins at a unit; one
that cuts inside a layer (``--granularity layer``) is refused in one line.

Exactness and complexity: the names are read off the plan and the model, ``O(segments + modules)``;
nothing is measured or searched here. torch is not imported (the model is only walked).

Reference: torchtitan 0.2.2, ``torchtitan/distributed/pipeline_parallel.py`` and
``torchtitan/config/job_config.py`` (the ``Parallelism`` section).
"""

from __future__ import annotations

import collections
import json
import re
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UsageError

if TYPE_CHECKING:
    from .pipeline_plan import PipelinePlan

#: torch's schedule names as ``get_schedule_class`` (and torchtitan's
#: ``parallelism.pipeline_parallel_schedule``) spell them, by ``devplace plan --schedule`` name.
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "looped-bfs": "LoopedBFS",
                  "interleaved-zb": "InterleavedZeroBubble", "zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
#: torchtitan's Hugging Face backend's name of each part of a ``...ForCausalLM`` (relative to it).
HF_UNITS = {"tok_embeddings": ("model.embed_tokens",), "norm": ("model.norm", "model.final_layernorm"),
            "output": ("lm_head",), "rotary_emb": ("model.rotary_emb",)}
#: Where a ``...ForCausalLM`` keeps its stack of layers (torchtitan's backend's ``layers``).
HF_LAYERS = "model.layers"


# -- torchtitan's default split ----------------------------------------------------------------
def layer_stack(names: Sequence[str]) -> list[int]:
    """The segments that are the model's stack of layers: those named ``PREFIX.N`` by the prefix
    most of them share (``model.model.layers.0`` .. ``.31``), in order; empty when none are.

    >>> layer_stack(["model", "model.layers.0", "model.layers.1", "model.layers.2", "model.lm_head"])
    [1, 2, 3]
    """
    prefix = {i: m.group(1) for i, nm in enumerate(names) if (m := re.fullmatch(r"(.+)\.\d+", nm))}
    if not prefix:
        return []
    stack = collections.Counter(prefix.values()).most_common(1)[0][0]
    return [i for i, p in prefix.items() if p == stack]


def torchtitan_split(names: Sequence[str], stages: int, input_weight: int = 1, output_weight: int = 1) -> list[int]:
    """Stage of each segment in torchtitan's default split of a decoder LM
    (``generate_llm_fqn_per_model_part``, torchtitan 0.2 and 0.3): the layers dealt out evenly,
    with the modules before the stack of layers (the embedding) counted as ``input_weight``
    layers on the first stage and those after it (the final norm and the output head) as
    ``output_weight`` layers on the last; a stage's share of the remainder goes to the first
    stages. What a torchtitan user runs unless they write the module names of each stage.

    Raises
    ------
    UsageError
        No stack of layers among the segments, or more stages than torchtitan allows (each
        stage holds at least one layer's worth, and the weights fit in a stage's share).

    >>> torchtitan_split(["embed", "layers.0", "layers.1", "layers.2", "layers.3", "head"], 2)
    [0, 0, 0, 1, 1, 1]
    """
    layers = layer_stack(names)
    if not layers:
        raise UsageError("torchtitan's split deals out a stack of layers, and these segments have none")
    effective = len(layers) + input_weight + output_weight
    per, extra = divmod(effective, stages)
    if per == 0 or input_weight > per or output_weight > per:
        raise UsageError(f"torchtitan's split cannot make {stages} stages of {len(layers)} layers (with the input "
                         f"and output weighed as {input_weight} and {output_weight}): each stage needs a layer's worth")
    share = [per + (s < extra) for s in range(stages)]
    share[0] -= input_weight
    share[-1] -= output_weight
    layer_stage = [s for s, n in enumerate(share) for _ in range(n)][: len(layers)]
    layer_stage += [stages - 1] * (len(layers) - len(layer_stage))  # torchtitan leaves no layer out
    out, stage = [], 0
    of = dict(zip(layers, layer_stage))
    for i in range(len(names)):  # a segment inside the stack that is no layer goes with the layer before it
        stage = stages - 1 if i > layers[-1] else of.get(i, stage)
        out.append(stage)
    return out


# -- a plan's stages in torchtitan's names -----------------------------------------------------
def _causal_lm(model: Any) -> str | None:
    """The qualified name of the Hugging Face ``...ForCausalLM`` in ``model`` ('' for the model
    itself; None when there is none): the module with ``model.embed_tokens``, ``model.layers``
    and ``lm_head``."""
    for name, module in model.named_modules():
        inner = getattr(module, "model", None)
        if all(hasattr(inner, a) for a in ("embed_tokens", "layers")) and hasattr(module, "lm_head"):
            return name
    return None


def units(model: Any) -> list[tuple[str, str]]:
    """``(torchtitan name, the module's qualified name in model)`` of every unit torchtitan keeps
    or drops whole, in the model's order: a Hugging Face causal LM's parts as torchtitan's
    Hugging Face backend names them, else the model's top-level modules, each entry of a
    ``ModuleList`` or ``ModuleDict`` a unit of its own.

    >>> import torch
    >>> net = torch.nn.Module()
    >>> net.tok_embeddings, net.norm = torch.nn.Embedding(8, 4), torch.nn.LayerNorm(4)
    >>> net.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
    >>> [titan for titan, _ in units(net)]
    ['tok_embeddings', 'norm', 'layers.0', 'layers.1']
    """
    from torch import nn  # the model's own torch: loaded already

    lm = _causal_lm(model)
    if lm is None:
        out = []
        for name, child in model.named_children():
            if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
                out += [(f"{name}.{key}", f"{name}.{key}") for key, _ in child.named_children()]
            else:
                out.append((name, name))
        return out
    prefix = f"{lm}." if lm else ""
    present = {name for name, _ in model.named_modules()}
    out = [("tok_embeddings", prefix + HF_UNITS["tok_embeddings"][0])]
    stack = model.get_submodule(prefix + HF_LAYERS)
    out += [(f"layers.{key}", f"{prefix}{HF_LAYERS}.{key}") for key, _ in stack.named_children()]
    for titan in ("norm", "output", "rotary_emb"):
        out += [(titan, prefix + fqn) for fqn in HF_UNITS[titan] if prefix + fqn in present][:1]
    return out


def model_parts(plan: PipelinePlan, model: Any) -> list[list[str]]:
    """torchtitan's ``module_fqns_per_model_part`` for the plan: the units of each stage, in
    stage order (torchtitan places stage ``s`` on a rank as torch's schedule class does, as the
    plan does).

    A unit that begins a segment is on that segment's stage; one that begins none runs inside
    the segment before it (the embedding inside the first, a final norm inside the last
    layer's), and one without parameters that begins none (a rotary embedding) is on every
    stage, since every stage may read it.

    Raises
    ------
    UsageError
        A stage begins at a segment that is no unit (the plan cuts inside a layer), or the
        model has no unit among the plan's segments (it is not the model that was planned).
    """
    names, stage_of = plan.names, plan.stage_of
    seg_of = {nm: i for i, nm in enumerate(names)}
    table = units(model)
    own = {fqn for _, fqn in table}
    for st, segs in enumerate(plan.stage_segments[1:], start=1):
        begin = names[segs[0]]
        if begin not in own:
            raise UsageError(f"stage {st} begins at {begin}, inside one of torchtitan's units (its layers and top-level "
                             "modules, kept or dropped whole): plan with --granularity block to hand the plan to "
                             "torchtitan")
    if not own & set(names):
        raise UsageError("none of the model's modules begins a segment of the plan: plan this model to hand it "
                         "to torchtitan")
    parts: list[list[str]] = [[] for _ in range(plan.num_stages)]
    stage = 0
    for titan, fqn in table:
        if fqn in seg_of:
            stage = stage_of[seg_of[fqn]]
        elif not any(True for _ in model.get_submodule(fqn).parameters()):
            for part in parts:
                part.append(titan)
            continue
        parts[stage].append(titan)
    return parts


# -- the job config ----------------------------------------------------------------------------
def job_config(plan: PipelinePlan, model: Any) -> dict[str, dict[str, Any]]:
    """torchtitan's job config sections for the plan: ``job`` (its description), ``training``
    (the batch, and the sequence length of a token input), ``parallelism`` (pipeline degree,
    schedule, micro-batch size, the module names of each stage) and ``activation_checkpoint``.

    torchtitan recomputes activations on every layer or none: a plan that recomputes on some
    stages only is handed over as ``full`` (it fits; its step is then slower than forecast), and
    the description says so.

    Raises
    ------
    UsageError
        An inference plan (torchtitan trains), or a plan that `model_parts` cannot name.
    """
    if not plan.training:
        raise UsageError("--emit torchtitan: torchtitan trains, and this plan is for inference (leave out --inference)")
    recompute = plan.recompute or []
    what = (f"devplace plan {plan.model_spec or 'MODEL'}: {plan.num_stages} stages on {plan.ranks} ranks, "
            f"{plan.schedule}, {plan.microbatches} micro-batches, forecast step {plan.step_ms():.4g} ms ({plan.status})")
    if any(recompute) and not all(recompute):
        what += (f"; the plan recomputes on stages {[s for s, r in enumerate(recompute) if r]} only, torchtitan on "
                 "every layer")
    training: dict[str, Any] = {"local_batch_size": plan.batch}
    inputs = plan.graph.meta.get("inputs") or []
    if inputs and len(inputs[0]) == 2:  # tokens: (micro-batch, sequence)
        training["seq_len"] = int(inputs[0][1])
    return {
        "job": {"description": what},
        "training": training,
        "parallelism": {
            "pipeline_parallel_degree": plan.ranks,
            "pipeline_parallel_schedule": SCHEDULE_NAMES[plan.schedule],
            "pipeline_parallel_microbatch_size": plan.batch // plan.microbatches,
            "module_fqns_per_model_part": model_parts(plan, model),
        },
        "activation_checkpoint": {"mode": "full" if any(recompute) else "none"},
    }


def to_toml(config: dict[str, dict[str, Any]], header: Sequence[str] = ()) -> str:
    """TOML text of a job config: ``header`` as comment lines, then a table per section, values
    of strings, numbers and lists of them (a JSON string, number or array is TOML too).

    >>> print(to_toml({"parallelism": {"pipeline_parallel_degree": 2, "module_fqns_per_model_part": [["a"], ["b"]]}},
    ...               ["a plan"]))
    # a plan
    [parallelism]
    pipeline_parallel_degree = 2
    module_fqns_per_model_part = [["a"], ["b"]]
    <BLANKLINE>
    """
    lines = [f"# {line}" for line in header]
    for section, values in config.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)
