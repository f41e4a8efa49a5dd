"""Measure a captured model's segments: each action's time, memory, and the bytes they pass.

Problem
-------
A plan needs, for every segment of a capture (`devplace_lite.pipeline.capture.Capture`), the
time of each action a schedule runs on it: the forward (F), the full backward (B), and the
zero-bubble schedules' input-gradient (I) and weight-gradient (W) passes; and its memory: the
bytes of its parameters and their gradients, of the activations autograd saves for its
backward, and of every value passed between segments. The times must be those the segment
takes inside a stage, measured on a shared machine whose load comes and goes.

How
---
`measure_segments` runs the segments in order on the example micro-batch, each ``repeats``
times after ``warmup``, timing the forward with the CPU time of the calling thread on one torch
thread (a shared machine's load does not inflate it: waiting for a core is not CPU time), and
in training the segment's own backward passes, fed with ones, on fresh leaf copies of its
inputs (so in-place operators never touch a saved tensor): the full backward, and torch's own
input-gradient and weight-gradient passes that the zero-bubble schedules run instead. A
segment's inputs keep the strides the model gives them (a boundary made them contiguous;
inside a stage the next operator reads them as the model made them, and its speed can depend
on it: ConvNeXt's depthwise convolutions). The repeats go round the segments (a busy machine
slows a process for seconds at a time, so each segment's runs are spread over the whole
measurement); a segment's time is its median share of a round times the least round's time
(interference only ever adds, and the least of whole rounds, like a run's least time of a
whole stage, is not the sum of each segment's least, which is lower on a busy machine). The
model is also timed whole in the same rounds: a segment's boundary (its outputs made
contiguous, tuples packed and unpacked, one more module call) costs time that a stage holding
several segments does not pay (T5's forward: 8-17 %), so the segments' times of each kind are
scaled to sum to the whole model's (``boundary_scale``, at most 1). With a GPU ``spec`` each
run is priced instead by that GPU's roofline of the kernels it launched (the profiler's FLOP
and bytes count, `devplace_lite.pipeline.profile.KernelLog`). Also recorded: the bytes of the
parameters each segment holds, the activations autograd saves for its backward (and which
values several segments save: a producer its output and a consumer the same tensor as its
input, one tensor inside a stage but a copy per segment here, ``shared_saves``, counted once a
stage by the planner), and the bytes of every value passed between segments.

Exactness: a measurement, not a proof: a least CPU time and its error on a loaded machine
(chapter 08 and ``benchmarks/schedules`` compare the forecast with runs). The roofline is a
model: deterministic, the same figures on every machine, as good as a roofline is.
Complexity: ``warmup + repeats`` forward (and backward) passes of the segments and of the whole
model (one more export for the whole model on torch's route); one pass on a roofline.

Reference: torch's ``stage_backward_input`` and ``stage_backward_weight``
(``torch.distributed.pipelining``, torch 2.13), the passes of its zero-bubble schedules
(P. Qi, X. Wan, G. Huang, M. Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024).

Example
-------
>>> import torch
>>> from devplace_lite.pipeline.capture import capture
>>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
>>> m = measure_segments(capture(net, (torch.randn(2, 8),)), repeats=2, warmup=0)
>>> len(m.forward_ms), m.param_bytes
(3, [576, 0, 272])
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch import nn
from torch.utils._pytree import tree_flatten

from ..errors import GraphError, UsageError
from .capture import Capture, _run_in_order, export_copy, meta_run, to_device
from .profile import ACC_KERNEL_OVERHEAD_MS, FusedAttention, KernelLog, roofline_ms
from .torch_split import known_warnings_filtered, split_policy


@dataclass
class SegmentTimes:
    """What measuring the segments gave, per segment (lists in segment order).

    Times are the least CPU time over the repeats, in ms, on one torch thread;
    ``activation_bytes`` the tensors autograd saves for the segment's backward (training), or
    its output (inference); ``inputs[i]``: ``(source, position, bytes, float)`` of every value
    segment ``i`` reads, the source a segment index (and the output's position) or
    ``"input:<k>"``.
    """

    forward_ms: list[float]
    backward_ms: list[float]
    param_bytes: list[int]
    grad_bytes: list[int]
    activation_bytes: list[int]
    inputs: list[list[tuple[Any, int, bool]]]
    training: bool
    repeats: int
    threads: int = 1
    input_bytes: list[int] = field(default_factory=list)
    device: str = "cpu"
    #: torch's input-gradient and weight-gradient passes (the zero-bubble schedules' ``I`` and
    #: ``W``; their sum is more than the full backward). A segment none of whose inputs takes a
    #: gradient has I 0 and W its whole backward, as torch's first stage runs them.
    backward_input_ms: list[float] = field(default_factory=list)
    backward_weight_ms: list[float] = field(default_factory=list)
    #: Bytes of each segment's outputs (the last one's are the model's: the loss keeps them).
    output_bytes: list[int] = field(default_factory=list)
    #: The accelerator whose roofline gave the times (`measure_segments`' ``spec``), else measured.
    spec: str | None = None
    #: Measured times only: the factor (at most 1) by which each kind's segment times were scaled
    #: so that they sum to the model timed whole (``{"F": ..., "B": ...}``; I and W as B), and those
    #: whole-model times (ms).
    boundary_scale: dict[str, float] | None = None
    whole_ms: dict[str, float] | None = None
    #: Segments that the deadline gave fewer than ``repeats`` timed runs (each got one at least).
    cut_short: int = 0
    #: Training: values that several segments save for their backward (a producer its output, a
    #: consumer its input), ``(bytes, [segments that save it])``: one tensor inside a stage, a
    #: copy per segment in the profile (each segment gets fresh inputs), so counted once a stage.
    shared_saves: list[tuple[int, list[int]]] = field(default_factory=list)


def _bytes(v: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor))


class _Saved:
    """Bytes of distinct tensors autograd saves (parameters excluded)."""

    def __init__(self, skip: set[int]) -> None:
        self.skip, self.seen, self.total = skip, set(), 0
        #: After a pass (`_timed_pass`): bytes saved of each input, and of each top-level output.
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    @staticmethod
    def _key(t: torch.Tensor) -> tuple:
        from torch._subclasses.fake_tensor import is_fake

        storage = t.untyped_storage()
        # a meta or fake tensor's data pointer is 0 for all of them: its storage tells them apart
        return (storage._cdata if t.is_meta or is_fake(t) else storage.data_ptr()), t.storage_offset(), tuple(t.shape)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = self._key(t)
        if id(t) not in self.skip and key not in self.seen:
            self.seen.add(key)
            # a broadcast view (stride 0: a mask over the heads) holds its storage alone
            self.total += min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
        return t

    def saved(self, v: Any) -> int:
        """Bytes of ``v`` if it is a tensor this meter saw saved, else 0."""
        return v.numel() * v.element_size() if isinstance(v, torch.Tensor) and self._key(v) in self.seen else 0

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

def _cpu_ms(fn) -> float:
    c0 = time.thread_time()
    fn()
    return (time.thread_time() - c0) * 1e3


def _cuda_ms(fn) -> float:
    """GPU time of ``fn``'s kernels between two CUDA events (run on an H100, 2026-11-27: `benchmarks/device.sh`)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def _roofline_clock(acc: Any):
    """A clock that runs ``fn`` once and answers the roofline time of the kernels it launched on
    accelerator ``acc`` (`devplace_lite.pipeline.profile`'s FLOP and bytes count, the same for a
    segment as for the layers it holds): deterministic, the same on every machine."""
    def clock(fn) -> float:
        log = KernelLog()
        with log:
            fn()
        return roofline_ms(log.kernels, acc, ACC_KERNEL_OVERHEAD_MS)

    return clock


@contextlib.contextmanager
def _torch_fails(what: str, device: str):
    """A torch error while timing ``what`` as one line that names it (`GraphError`), not a
    traceback: a kernel the device refuses, or memory it lacks."""
    try:
        yield
    except RuntimeError as e:  # torch's kernels raise RuntimeError, and OutOfMemoryError under it
        line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        fix = "; lower --batch or raise --microbatches" if isinstance(e, torch.OutOfMemoryError) else ""
        raise GraphError(f"torch failed timing {what} on {device}: {line[:300]}{fix}") from None


def _whole(cap: Capture) -> Capture:
    """``cap`` as one segment: the model's program without the segment boundaries, which a
    pipeline stage holding several segments does not run either (the export route: torch's
    pipeline with no split point; the routes devplace's splitter cuts: the exported or traced
    graph before it was cut)."""
    if cap.wiring is None:  # devplace's splitter cut it (from a trace or an export): the graph before the cut
        return Capture(model=cap.model, example=cap.example, how=cap.how, names=["(whole)"], modules=[cap.traced],
                       wiring=None, granularity=cap.granularity)
    from torch.distributed.pipelining import pipeline

    with known_warnings_filtered():
        pipe = pipeline(export_copy(cap.model), cap.example, split_policy=split_policy([]))
    return Capture(model=cap.model, example=cap.example, how=cap.how, names=["(whole)"],
                   modules=[pipe.get_stage_module(0)], wiring=pipe.split_gm, granularity=cap.granularity)


def _grads(src: Sequence[tuple]) -> list[bool]:
    """Which of a segment's arguments get a gradient: not the model's inputs, since a
    pipeline's first stage gets data whose gradient nobody computes (an image's gradient
    through the first convolution would add to that stage's backward, and be all of its
    input-gradient pass)."""
    return [s[0] != "input" for s in src]


def _leaves(args: Sequence[Any], grad: Sequence[bool], training: bool) -> list[Any]:
    """Fresh leaf copies of ``args``, those flagged in ``grad`` and floating-point requiring a
    gradient in training, as a stage receives them (cloned, so that an in-place operator never
    writes into the leaf)."""
    xs = []
    for a, g in zip(args, grad):
        if isinstance(a, torch.Tensor):
            leaf = a.detach().requires_grad_(training and g and a.is_floating_point())
            a = leaf.clone() if leaf.requires_grad else leaf
        xs.append(a)
    return xs


def _outputs(out: Any) -> list[torch.Tensor]:
    return [y for y in tree_flatten(out)[0] if isinstance(y, torch.Tensor) and y.requires_grad]


def _timed_pass(m: nn.Module, args: Sequence[Any], grad: Sequence[bool], training: bool, clock,
                meter: _Saved | None = None):
    """One forward of segment ``m`` on fresh leaf copies of ``args`` (`_leaves`) and, in
    training, the backward passes torch's schedules run, fed with ones: its input-gradient and
    weight-gradient passes (torch's own ``stage_backward_input`` and ``stage_backward_weight``,
    which the zero-bubble schedules call; their sum exceeds a full backward: the first walks
    the graph with hooks, the second walks it again from what the first kept), then, after a
    second forward, its full backward. Returns ``(F, I, B, W, output)``; I and W are None when
    no input takes a gradient (torch's first stage runs its whole backward as W), B None when
    there is nothing to differentiate. With ``meter`` the forward alone runs, untimed, and
    counts the saved tensors instead (the hooks cost time)."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    out: list[Any] = []
    f_ms = i_ms = b_ms = w_ms = None
    with torch.set_grad_enabled(training):
        # grad mode set here: `_run_in_order`'s no_grad would otherwise leave the fresh inputs
        # without requires_grad, and the backward would skip the inputs' gradients
        xs = _leaves(args, grad, training)
        if meter is not None:
            with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
                out.append(m(*xs))
            tops = list(out[0]) if isinstance(out[0], (tuple, list)) else [out[0]]
            meter.inputs, meter.outputs = [meter.saved(x) for x in xs], [meter.saved(y) for y in tops]
            return None, None, None, None, out[0]
        f_ms = clock(lambda: out.append(m(*xs)))
    ys = _outputs(out[0]) if training else []
    weights = [p for p in m.parameters() if p.requires_grad]
    if ys and any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs):
        # torch detaches a stage's outputs in place after the input pass, so give it copies (as
        # the run does for the zero-bubble schedules: `rank._fresh_copies`)
        ys = [y.clone() for y in ys]
        groups: list[Any] = []
        with warnings.catch_warnings():  # it sets .grad on the inputs: our leaves' clones, not leaves
            warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
            i_ms = clock(lambda: groups.append(stage_backward_input(ys, [torch.ones_like(y) for y in ys], xs,
                                                                    iter(weights))[1]))
        w_ms = clock(lambda: stage_backward_weight(iter(weights), groups[0]))
        for p in weights:
            p.grad = None
        with torch.enable_grad():
            xs = _leaves(args, grad, training)
            ys = _outputs(m(*xs))
    if ys:
        seeds = [torch.ones_like(y) for y in ys]
        b_ms = clock(lambda: torch.autograd.backward(ys, seeds))
    for p in weights:
        p.grad = None
    return f_ms, i_ms, b_ms, w_ms, out[0]


def _model_layout(m: nn.Module, args: Sequence[Any], layouts: dict[str, tuple[int, ...]]) -> list[Any]:
    """``args`` with the strides the model gives them where a boundary made them contiguous
    (`Capture.layouts`): inside a stage the next operator reads them so, and its speed can
    depend on it (ConvNeXt's depthwise convolution's backward on channels-last input: 2x)."""
    names = [n.name for n in m.graph.nodes if n.op == "placeholder"] if isinstance(m, fx.GraphModule) else []
    out = list(args)
    for k, (name, a) in enumerate(zip(names, args)):
        st = layouts.get(name)
        if st is not None and isinstance(a, torch.Tensor) and a.dim() == len(st) and _dense(a.shape, st):
            out[k] = torch.empty_strided(a.shape, st, dtype=a.dtype, device=a.device).copy_(a)
    return out


def _dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``stride`` lays ``shape`` out densely without overlap (a permutation of a
    contiguous layout). A broadcast view (stride 0) is not: one memory location per element
    cannot hold it, so such a value is profiled as the contiguous copy the boundary sends.

    Examples
    --------
    >>> _dense((2, 3, 4), (12, 1, 3)), _dense((2, 4), (1, 0))
    (True, False)
    """
    expected = 1
    for size, st in sorted(((n, s) for n, s in zip(shape, stride) if n > 1), key=lambda d: d[1]):
        if st != expected:
            return False
        expected *= size
    return True


def _round_estimate(rounds: Sequence[Sequence[float]]) -> list[float]:
    """Each segment's time from ``rounds`` (one list of segment times per round): its median
    share of a round times the least round. What a run measures of a stage is its least time
    over the micro-batches, a least *sum* of the stage's segments; the sum of each segment's own
    least time is below that on a busy machine (measured at load 10: 0.8-0.95 of it), so the
    least is taken of whole rounds, and the shares, from medians, are robust to a spike.

    Examples
    --------
    >>> _round_estimate([[1.0, 3.0], [2.0, 6.0], [1.0, 2.0]])  # round 2 a busy moment
    [0.75, 2.25]
    """
    if not rounds:
        return []
    n = len(rounds[0])
    med = [statistics.median(rd[i] for rd in rounds) for i in range(n)]
    total = sum(med)
    least = min(sum(rd) for rd in rounds)
    return [m * least / total if total > 0 else 0.0 for m in med]


def _signature(m: nn.Module, args: Sequence[Any], grad: Sequence[bool]) -> str | None:
    """What a roofline sees of segment ``m`` on ``args``: its graph's operators and wiring, the
    shapes, dtypes and trainability of its parameters and constants, and its inputs' shapes,
    strides, dtypes and gradients; None where it cannot say (a module called inside that is
    not devplace's own gradient guard, a segment that is not a graph). Two segments with one
    signature launch the same kernels with the same FLOPs and bytes and save the same tensors,
    whatever their names and values: the repeated layers of a decoder are priced once."""
    from .split import _GRAD_GUARD

    if not isinstance(m, fx.GraphModule):
        return None
    index: dict[fx.Node, int] = {}
    rows = []
    for k, n in enumerate(m.graph.nodes):
        index[n] = k
        target: Any = n.target
        if n.op == "placeholder":
            target = None
        elif n.op == "get_attr":
            v = m
            for part in str(n.target).split("."):
                v = getattr(v, part)
            target = ((tuple(v.shape), tuple(v.stride()), v.dtype, v.requires_grad) if isinstance(v, torch.Tensor)
                      else repr(v))
        elif n.op == "call_module":
            if not str(n.target).startswith(_GRAD_GUARD):
                return None
            sub = m.get_submodule(str(n.target))
            target = type(sub).__qualname__
            if any(True for _ in sub.parameters()) or any(True for _ in sub.buffers()):
                return None
        rows.append((n.op, target, fx.node.map_arg((n.args, n.kwargs), lambda a: index[a])))
    ins = [(tuple(a.shape), tuple(a.stride()), a.dtype, g) if isinstance(a, torch.Tensor) else repr(a)
           for a, g in zip(args, grad)]
    return repr((rows, ins))


def measure_segments(cap: Capture, *, training: bool = False, repeats: int = 5, warmup: int = 1,
                     threads: int = 1, device: str = "cpu", spec: str | None = None,
                     deadline: float | None = None) -> SegmentTimes:
    """Time every segment of ``cap`` on its example micro-batch (see the module docstring).

    The repeats go round the segments (every segment once, then again), and each segment's
    time is its median share of a round times the least round (`_round_estimate`). The model
    is also timed whole (`_whole`, in the same rounds): the segments'
    boundaries (outputs made contiguous, tuples packed and unpacked, one module call each) cost
    time that a stage holding several segments does not pay, so each kind's times are scaled
    by whole / sum of the segments (at most 1), recorded in ``boundary_scale``.

    ``deadline`` (a `time.monotonic` instant): past it no round starts once one timed round is
    in (the warm-ups are skipped if it has already passed); ``cut_short`` then counts every
    segment, since each got fewer than ``repeats`` timed runs.

    ``device="cuda"`` moves the segments to the current GPU and times them with CUDA events
    (the one-GPU measurement of a k-GPU pipeline). ``spec`` (``"V100"``, ``"A100"``,
    ``"H100"``) times them instead by the roofline of that accelerator, from the FLOPs and bytes
    of every kernel each segment launches (`devplace_lite.pipeline.profile`): no repeats, the
    same figures on any machine, a plan for GPUs made on a laptop."""
    if repeats < 1 or warmup < 0:
        raise UsageError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device cuda: torch sees no GPU on this machine (use cpu)")
    clock = _cpu_ms if device == "cpu" else _cuda_ms
    if spec is not None:
        from ..devices import SPECS

        if str(spec).upper() not in SPECS:
            raise UsageError(f"unknown accelerator spec {spec!r}; known: {', '.join(SPECS)}")
        if device != "cpu":
            raise UsageError("a roofline spec counts kernels on the CPU: leave device at cpu")
        clock, repeats, warmup = _roofline_clock(SPECS[str(spec).upper()]), 1, 0
    meta = meta_run(cap.model, cap.example)
    if spec is None and not isinstance(meta, contextlib.nullcontext):
        raise UsageError("the model is on the meta device: it has shapes but no numbers to time; give a roofline "
                         "spec (--spec H100) to price its kernels")
    # a roofline prices attention as the GPU runs it (one fused kernel), on meta tensors too
    fused = FusedAttention() if spec is not None else contextlib.nullcontext()
    example = tuple(t if t.is_meta else t.to(device) for t in cap.example)
    if device != "cpu":
        cap.modules = [to_device(m, device) for m in cap.modules]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    n = cap.num_segments
    acts, outb = [0] * n, [0] * n
    saves_in: list[list[int]] = [[] for _ in range(n)]
    saves_out: list[list[int]] = [[] for _ in range(n)]
    params, grads, inputs = [0] * n, [0] * n, [[] for _ in range(n)]
    calls: list[tuple[nn.Module, list[Any], list[bool]]] = []
    first_of: dict[str, int] = {}  # a segment's signature -> the first segment with it (`_signature`)
    same: dict[int, int] = {}  # a repeated segment -> that first segment
    try:
        meta.__enter__()
        fused.__enter__()
        for i, m, args, src in _run_in_order(cap, example):
            ps = list(m.parameters())
            params[i] = (sum(p.numel() * p.element_size() for p in ps)
                         + sum(b.numel() * b.element_size() for b in m.buffers()))
            grads[i] = sum(p.numel() * p.element_size() for p in ps if p.requires_grad)
            inputs[i] = [(s[1] if s[0] == "seg" else f"input:{s[1]}", s[-1] if s[0] == "seg" else None, _bytes(a),
                          isinstance(a, torch.Tensor) and a.is_floating_point()) for s, a in zip(src, args)]
            calls.append((m, _model_layout(m, args, cap.layouts), _grads(src)))
            # a roofline prices a segment by its signature alone: a repeat's figures are its first's
            sig = _signature(m, [*args, *calls[-1][1]], _grads(src) * 2) if spec is not None else None
            if sig is not None and sig in first_of:
                j = first_of[sig]
                acts[i], saves_in[i], saves_out[i], outb[i] = acts[j], saves_in[j], saves_out[j], outb[j]
                same[i] = j
                continue
            if sig is not None:
                first_of[sig] = i
            meter = _Saved({id(p) for p in ps})
            with _torch_fails(f"segment {cap.names[i]}", device):
                out = _timed_pass(m, args, _grads(src), training, clock, meter)[4]
            acts[i] = int(meter.total if training else _bytes(out))
            if training:
                saves_in[i], saves_out[i] = meter.inputs, meter.outputs
            outb[i] = _bytes(out)
        # a roofline prices kernels, and the boundaries' copies are kernels a stage runs too
        whole = None
        if spec is None and n > 1 and (cap.wiring is not None or cap.traced is not None):
            w = _whole(cap)
            if device != "cpu":
                w.modules = [to_device(m, device) for m in w.modules]
            for _, wm, wargs, wsrc in _run_in_order(w, example):
                whole = (wm, list(wargs), _grads(wsrc))
        rounds: list[list[tuple]] = []  # per timed round: (F, I, B, W) of each segment, then of the whole model
        for r in range(warmup + repeats):
            late = deadline is not None and time.monotonic() > deadline
            if late and rounds:
                break
            if late and r < warmup:
                continue
            got: list[tuple] = []
            for k, (label, (m, args, grad)) in enumerate(zip([f"segment {nm}" for nm in cap.names] + ["the whole model"],
                                                             calls + ([whole] if whole else []))):
                if k in same:
                    got.append(got[same[k]])
                    continue
                with _torch_fails(label, device):
                    got.append(_timed_pass(m, args, grad, training, clock)[:4])
            if r >= warmup:
                rounds.append(got)
    finally:
        fused.__exit__(None, None, None)
        meta.__exit__(None, None, None)
        torch.set_num_threads(before)
    fwd, bin_, bwd, wgt = (_round_estimate([[t[k] or 0.0 for t in rd[:n]] for rd in rounds]) for k in range(4))
    # no input takes a gradient: torch's input pass does nothing there and its weight pass is the whole backward
    wgt = [b if rounds and rounds[0][i][3] is None else w for i, (w, b) in enumerate(zip(wgt, bwd))]
    scale, whole_ms = None, None
    if whole is not None:
        whole_ms = {key: min(rd[n][k] or 0.0 for rd in rounds) for key, k in (("F", 0), ("B", 2))}
        scale = {key: min(1.0, whole_ms[key] / sum(seg)) if sum(seg) > 0 and whole_ms[key] > 0 else 1.0
                 for key, seg in (("F", fwd), ("B", bwd))}
        fwd = [t * scale["F"] for t in fwd]
        bwd, bin_, wgt = ([t * scale["B"] for t in ts] for ts in (bwd, bin_, wgt))
    return SegmentTimes(forward_ms=fwd, backward_ms=bwd, param_bytes=params, grad_bytes=grads,
                        activation_bytes=acts, inputs=inputs, training=training, repeats=repeats, threads=threads,
                        input_bytes=[_bytes(x) for x in cap.example], device=device, backward_input_ms=bin_,
                        backward_weight_ms=wgt, output_bytes=outb, spec=None if spec is None else str(spec).upper(),
                        boundary_scale=scale, whole_ms=whole_ms,
                        cut_short=n if len(rounds) < repeats else 0,
                        shared_saves=_shared_saves(inputs, saves_in, saves_out))


def _shared_saves(inputs: Sequence[Sequence[tuple]], saves_in: Sequence[Sequence[int]],
                  saves_out: Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
    """The values more than one segment saves: ``(bytes, segments)`` (see `SegmentTimes`).
    A value is a model input or a producer's output position; its producer counts when it
    saved that output (a value the boundary copied is the copy there, and is not matched:
    the count errs high, as before)."""
    by_value: dict[tuple, tuple[int, list[int]]] = {}
    for i, ins in enumerate(inputs):
        for k, (src, position, _, _) in enumerate(ins):
            b = saves_in[i][k] if k < len(saves_in[i]) else 0
            if not b:
                continue
            key = (src, position)
            size, segs = by_value.setdefault(key, (b, []))
            segs.append(i)
            if not isinstance(src, str) and len(segs) == 1:
                outs = saves_out[src]
                q = 0 if position is None else position
                if q < len(outs) and outs[q] == b:
                    segs.insert(0, src)
    return [(size, segs) for size, segs in by_value.values() if len(segs) > 1]
