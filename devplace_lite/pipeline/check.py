"""Is a pipeline run exact? Its outputs and gradients against the unsplit model's, and where not.

Problem
-------
A split run must compute what the model computes: the last stage's outputs equal to the
unsplit model's on the same batch, and every stage's parameter gradients (tied weights after
their all-reduce) equal to the unsplit model's. When they are not, a user needs to know where:
at which stage's boundary, or whether the model itself is not batch-independent (micro-batching
changes its answer), or whether the split computes something else.

How
---
Each rank compares what it holds (`_check`, within ``rtol=1e-4, atol=1e-5``); every rank's
digest of the model as it built it (`model_digest`) says whether they all built the same one;
`_check_stages` runs the whole split again in one process, stage after stage on each
micro-batch, and compares each stage's outputs in the run with it; `check_failure` turns the
gathered comparison into one line. `head` is the tensor a step's loss reads and a check compares.

Exactness: a comparison within a stated tolerance, which says nothing when nothing was
compared: no output or no parameter gradient compared is a failure. Complexity: one forward
and backward of the unsplit model per rank, and one forward of the split per micro-batch.

Reference: none beyond ``torch.allclose``, whose test ``|a - b| <= atol + rtol |b|`` it applies.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import GraphError


def head(out: Any) -> Any:
    """The tensor a step's loss reads: the output itself, else the first floating-point tensor in
    it (the logits of a Hugging Face ``ModelOutput``, the first of a tuple)."""
    import torch
    from torch.utils._pytree import tree_flatten

    if isinstance(out, torch.Tensor):
        return out
    leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise GraphError(f"the model's output ({type(out).__name__}) holds no floating-point tensor to train on")
    return leaves[0]


def _check(model: Any, inputs: tuple, target: Any, training: bool, stage_modules: Sequence[Any],
           out: Any) -> dict[str, Any]:
    """This rank's outputs (last rank) and gradients against the unsplit model's."""
    import torch
    import torch.nn.functional as F

    ref_model = model
    ref_model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(training):
        ref = head(ref_model(*inputs))
        if training:
            F.mse_loss(ref, target.cpu()).backward()
    res: dict[str, Any] = {}
    if out is not None:
        o = head(out).detach().cpu()
        res["outputs_allclose"] = bool(torch.allclose(o, ref.detach(), rtol=1e-4, atol=1e-5))
        res["max_output_diff"] = float((o - ref.detach()).abs().max())
    if training:
        params = dict(ref_model.named_parameters(remove_duplicate=False))
        diffs, ok, n = [], True, 0
        for name, p in ((n, p) for mod in stage_modules for n, p in mod.named_parameters(remove_duplicate=False)):
            if p.grad is None or name not in params or params[name].grad is None:
                continue
            g, r = p.grad.detach().cpu(), params[name].grad
            diffs.append(float((g - r).abs().max()))
            ok &= bool(torch.allclose(g, r, rtol=1e-4, atol=1e-5))
            n += 1
        res.update(grads_allclose=ok and n > 0, max_grad_diff=max(diffs, default=0.0), parameters_checked=n)
    return res


def model_digest(model: Any) -> str:
    """A digest of the model's parameters and buffers, by name: every rank builds the model from
    its spec, and a check means something only when they all built the same one.

    >>> import torch
    >>> torch.manual_seed(0); a = torch.nn.Linear(2, 2)  # doctest: +ELLIPSIS
    <...>
    >>> torch.manual_seed(0); b = torch.nn.Linear(2, 2)  # doctest: +ELLIPSIS
    <...>
    >>> model_digest(a) == model_digest(b) != model_digest(torch.nn.Linear(2, 2))
    True
    """
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _close(a: Any, b: Any) -> tuple[bool, float]:
    """Whether two values (tensors, or tuples of them) agree within the check's tolerance, and
    their largest difference."""
    import torch

    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    ok, worst = len(a) == len(b), 0.0
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            continue
        if x.shape != y.shape:
            return False, float("inf")
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.is_floating_point() or y.is_floating_point():
            x, y = x.double(), y.double()
            worst = max(worst, float((x - y).abs().max())) if x.numel() else worst
            ok &= bool(torch.allclose(x, y, rtol=1e-4, atol=1e-5))
        else:
            ok &= bool(torch.equal(x, y))
    return ok, worst


def _check_stages(modules: Sequence[Any], xs: tuple, microbatches: int, seen: dict, model: Any = None,
                  inputs: tuple = ()) -> dict[str, Any]:
    """Where a failed check's difference comes from. The whole split is run again here, in this
    one process, stage after stage on each micro-batch (copies of its inputs, no grad); each of
    this rank's stages' outputs in the run (``seen``, by ``(stage, chunk)``) is compared with it,
    so the first stage that differs names the boundary where the run went wrong. With ``model``
    (the last rank, ``inputs`` in the model's order) the unsplit model also runs on each
    micro-batch alone: if that differs from the model on the whole batch, the model is not
    batch-independent and micro-batching changes its answer (``microbatched``); if the split run
    here differs from it, the split itself computes something else (``split_here``)."""
    import torch

    def cut(values: tuple, c: int) -> tuple:
        return tuple(t.tensor_split(microbatches)[c] if isinstance(t, torch.Tensor) and t.dim() else t
                     for t in values)

    res: dict[str, Any] = {"stage_outputs": {}}
    chunks = [cut(xs, c) for c in range(microbatches)]
    finals = []
    with torch.no_grad():
        for c, cur in enumerate(chunks):
            for s, mod in enumerate(modules):
                got = mod(*(v.detach().clone() if isinstance(v, torch.Tensor) else v for v in cur))
                cur = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                if (s, c) in seen:
                    ok, diff = _close(seen[s, c], cur)
                    was = res["stage_outputs"].setdefault(str(s), {"allclose": True, "max_diff": 0.0})
                    was["allclose"] &= ok
                    was["max_diff"] = max(was["max_diff"], diff)
            finals.append(cur)
        if model is not None:
            alone = torch.cat([head(model(*cut(inputs, c))) for c in range(microbatches)])
            ok, diff = _close(alone, head(model(*inputs)))
            res["microbatched"] = {"allclose": ok, "max_diff": diff}
            ok, diff = _close(torch.cat([head(f) for f in finals]), alone)
            res["split_here"] = {"allclose": ok, "max_diff": diff}
    return res


def check_failure(plan: dict, check: dict[str, Any]) -> str | None:
    """One line saying what differs from the unsplit model, and where, or None when the check
    passed: the outputs (the first stage whose outputs in the run differ from the same stages
    run in one process, else whether micro-batching or the split itself changes the answer) and
    the gradients. No output or no parameter gradient compared is a failure too: a check that
    compared nothing proves nothing.

    >>> plan = {"stages": 2, "training": True, "split_points": ["blocks.2"]}
    >>> check = {"outputs_allclose": False, "max_output_diff": 5.8, "grads_allclose": False, "max_grad_diff": 0.017,
    ...          "parameters_checked": 9, "stage_outputs": [{"allclose": True, "max_diff": 0.0},
    ...                                                       {"allclose": False, "max_diff": 5.8}]}
    >>> check_failure(plan, check)
    'check failed: outputs differ from the unsplit model by up to 5.8 (first at stage 1, which begins at blocks.2), parameter gradients by up to 0.017'
    >>> check_failure(plan, {**check, "outputs_allclose": True, "grads_allclose": True}) is None
    True
    """
    parts = []
    if check.get("outputs_allclose") is not True:
        diff = check.get("max_output_diff")
        where = ""
        first = next((s for s, v in enumerate(check.get("stage_outputs") or []) if v and not v["allclose"]), None)
        if first is not None:
            points = plan.get("split_points") or []
            where = (f" (first at stage {first}, which begins at {points[first - 1]})" if 0 < first <= len(points)
                     else f" (first at stage {first}, the first stage)")
        elif not (check.get("microbatched") or {"allclose": True})["allclose"]:
            where = (f" (every stage computes what it computes in one process; the model itself on "
                     f"{plan.get('microbatches', '?')} micro-batches of {plan.get('microbatch', '?')} differs from it on the "
                     f"whole batch by up to {check['microbatched']['max_diff']:.3g}: its computation is not "
                     "batch-independent, so micro-batching changes its answer)")
        elif not (check.get("split_here") or {"allclose": True})["allclose"]:
            where = (" (the split run stage after stage in one process differs too, by up to "
                     f"{check['split_here']['max_diff']:.3g}: the split itself computes something else)")
        parts.append("no output to compare" if diff is None else
                     f"outputs differ from the unsplit model by up to {diff:.3g}{where}")
    if plan.get("training"):
        if not check.get("parameters_checked"):
            parts.append("no parameter gradient compared")
        elif check.get("grads_allclose") is not True:
            parts.append(f"parameter gradients by up to {check.get('max_grad_diff', float('nan')):.3g}")
    return "check failed: " + ", ".join(parts) if parts else None
