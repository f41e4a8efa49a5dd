"""The torchrun script of a plan: ``run_pipeline.py``, written beside ``plan.json``.

The script holds the plan's split points (``SplitPoint.BEGINNING``), its schedule class and
where each stage runs, says in its docstring how a rank builds its stages (torch's pipelining,
or devplace's splitter over the exported graph or a torch.fx trace) and how to launch it, and
calls `devplace_lite.pipeline.rank.main` on every rank. Writing it is part of planning: it
does not import the runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..files import write_text_atomic

_SCRIPT = '''#!/usr/bin/env python3
"""{model}: {stages} pipeline stages planned by devplace ({method}; gap to the proven bound {gap}).

Run it with torchrun, one process per rank ({ranks} rank(s), {per_rank} stage(s) each; gloo on CPU, NCCL on GPUs):

    torchrun --nproc-per-node {ranks} run_pipeline.py [--steps 5] [--check] [--device cuda]
    # across machines:
    torchrun --nnodes N --node-rank R --nproc-per-node {ranks}/N --rdzv-endpoint HOST:PORT run_pipeline.py

Each rank does, with torch.distributed.pipelining:

{build}
    {schedule_class}({stage_arg}, {microbatches}, loss_fn=loss_fn).step(batch on the first rank, target on the last)

and sums the gradients of weights replicated on several stages ({tied}).
plan.json beside this file holds the forecast, the memory of every stage and the model spec.
"""
from torch.distributed.pipelining import SplitPoint

SPLIT_SPEC = {{
{spec}}}
SCHEDULE = {schedule_class!r}
STAGE_TO_RANK = {stage_to_rank!r}  # stage -> rank, as {schedule_class} places them

if __name__ == "__main__":
    import sys
    from pathlib import Path

    from devplace_lite.pipeline.rank import main

    sys.exit(main(Path(__file__).with_name("plan.json"), SPLIT_SPEC))
'''


_MESH_SCRIPT = '''#!/usr/bin/env python3
"""{model}: {dp} data-parallel replica(s) x {pp} pipeline stage(s) x {tp} tensor shard(s), planned by devplace ({status}).

Run it with torchrun, one process per device ({world} in all; gloo on CPU, NCCL on GPUs):

    torchrun --nproc-per-node {world} run_pipeline.py [--steps 5] [--check] [--device cuda]

Each rank (devplace_lite.pipeline.mesh_run) lays the ranks out with init_device_mesh as (dp, pp, tp),
cuts the exported model at SPLIT_POINTS, splits its stage's column-then-row groups over its tensor
group with parallelize_module (ColwiseParallel, RowwiseParallel), wraps the stage in
DistributedDataParallel over its data group, and runs {schedule_class} with {microbatches}
micro-batch(es) per replica over its pipeline group. Each rank writes rank<R>.json (CPU time per
step, and with --check its comparison with the unsplit model) into --out (default: this folder).
plan.json beside this file holds the forecast and the mesh shapes weighed.
"""
import sys
from pathlib import Path

SPLIT_POINTS = {points!r}
ARGS = {args!r}

if __name__ == "__main__":
    from devplace_lite.pipeline.mesh_run import main

    extra = sys.argv[1:]
    if "--out" not in extra:
        extra += ["--out", str(Path(__file__).resolve().parent)]
    sys.exit(main(ARGS + ["--points", ",".join(SPLIT_POINTS)] + extra))
'''


def mesh_args(plan: Any) -> list[str]:
    """The arguments of `devplace_lite.pipeline.mesh_run.main` that run a mesh plan (its split
    points apart): the model spec, the degrees, the schedule, the micro-batches and the batch."""
    return ["--model", str(plan.model_spec), "--dp", str(plan.dp), "--pp", str(plan.ranks), "--tp", str(plan.tp),
            "--schedule", plan.schedule, "--microbatches", str(plan.microbatches),
            "--batch", str(plan.batch * plan.dp), "--seed", str(plan.seed)]


#: How a rank builds its stages, for the script's docstring: torch's pipelining, or devplace's splitter.
_PIPE = ("    pipe = pipeline(model, microbatch, split_spec=SPLIT_SPEC)\n"
         "    stages = [pipe.build_stage(s, device) for s in STAGE_TO_RANK if STAGE_TO_RANK[s] == rank]")
_OWN = ("    split = {cut}(model, microbatch, SPLIT_SPEC)  # {how}, cut by devplace's splitter\n"
        "    stages = [PipelineStage(split.stages[s], s, ...) for s in STAGE_TO_RANK if STAGE_TO_RANK[s] == rank]")


def write_script(path: str | Path, plan: Any) -> None:
    """Write the torchrun script of ``plan`` (a `PipelinePlan`) to ``path``, as every output is
    (`devplace_lite.files.write_atomic`): a mesh plan's (``plan.devices``) runs
    `devplace_lite.pipeline.mesh_run` on every rank, a pipeline's `devplace_lite.pipeline.rank`."""
    from ..schedules.simulate import SCHEDULES

    if plan.devices is not None:
        write_text_atomic(path, _MESH_SCRIPT.format(
            model=plan.model_spec or plan.graph.meta.get("model"), dp=plan.dp, pp=plan.ranks, tp=plan.tp,
            status=plan.status, world=plan.dp * plan.ranks * plan.tp, microbatches=plan.microbatches,
            schedule_class=SCHEDULES[plan.schedule].torch_class, points=list(plan.split_points), args=mesh_args(plan)))
        return
    spec = "".join(f"    {fqn!r}: SplitPoint.BEGINNING,\n" for fqn in plan.split_points)
    tied = "; ".join(t["parameter"] for t in plan.tied if len(t["stages"]) > 1) or "none here"
    gap = "unknown" if plan.gap is None else f"{100 * plan.gap:.1f} %"
    text = _SCRIPT.format(model=plan.model_spec or plan.graph.meta.get("model"), stages=plan.num_stages,
                          build=_build_text(plan.capture_how),
                          method=plan.method, gap=gap, microbatches=plan.microbatches, spec=spec, tied=tied,
                          schedule_class=SCHEDULES[plan.schedule].torch_class, ranks=plan.ranks,
                          per_rank=plan.per_rank, stage_to_rank=dict(enumerate(plan.stage_ranks)),
                          stage_arg="stages[0]" if plan.per_rank == 1 and SCHEDULES[plan.schedule].fixed else "stages")
    write_text_atomic(path, text)


def _build_text(how: str) -> str:
    """What the script's docstring says a rank does to build its stages, for capture route ``how``."""
    from .capture import HOW_EXPORT_SPLIT, HOW_FX

    if how == HOW_EXPORT_SPLIT:
        return _OWN.format(cut="export_split", how="torch.export")
    if how == HOW_FX:
        return _OWN.format(cut="fx_split", how="a torch.fx trace")
    return _PIPE
