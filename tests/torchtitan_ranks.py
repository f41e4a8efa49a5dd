"""One rank of a torchtitan pipeline built from a job config devplace wrote (tests/test_torchtitan.py).

``torchrun --nproc-per-node P tests/torchtitan_ranks.py CONFIG MODEL OUT``: torchtitan's own
config loader reads CONFIG, its own split function (``pipeline_module_split``) builds this
rank's stages of MODEL (``module:function``, as ``devplace plan`` takes it) from the config's
module names, its own schedule builder runs one step on gloo, and the rank writes to
``OUT.<rank>.json`` how far its losses and its parameters' gradients are from the unsplit
model's, run on the same micro-batches.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torchtitan.components.loss import cross_entropy_loss
from torchtitan.config import ConfigManager
from torchtitan.distributed.pipeline_parallel import build_pipeline_schedule, pipeline_module_split

from devplace_lite.zoo import load


def main(config_path: str, spec: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    job = ConfigManager().parse_args(["--job.config_file", config_path])
    par = job.parallelism
    model, (tokens,) = load(spec, batch=job.training.local_batch_size, seed=0)
    labels = torch.roll(tokens, -1, dims=1)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
    stages, parts = pipeline_module_split(model, mesh["pp"], par.pipeline_parallel_schedule, torch.device("cpu"),
                                          par.module_fqns_per_model_part)
    schedule = build_pipeline_schedule(job, stages, cross_entropy_loss)
    first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
    losses: list[torch.Tensor] = []
    schedule.step(*((tokens,) if first else ()), target=labels if last else None, losses=losses if last else None)

    # the unsplit model on the same micro-batches: scale_grads=False sums their gradients
    mb = par.pipeline_parallel_microbatch_size
    whole = [cross_entropy_loss(model(t), y) for t, y in zip(tokens.split(mb), labels.split(mb))]
    torch.stack(whole).sum().backward()
    grads = dict(model.named_parameters())
    diffs = {name: float((p.grad - grads[name].grad).abs().max())
             for part in parts for name, p in part.named_parameters()}
    loss_diff = max((abs(float(a.detach()) - float(b.detach())) for a, b in zip(losses, whole)), default=None)
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"rank": rank, "stages": [s.stage_index for s in stages], "losses": len(losses),
                   "microbatches": len(whole), "loss_diff": loss_diff, "grad_diff": diffs,
                   "parameters": sorted(grads)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
