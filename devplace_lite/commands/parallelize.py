"""``devplace parallelize FILE``: plan data, tensor and pipeline parallelism (Piper's model).

::

    devplace parallelize FILE [-k K] [--memory BYTES] [--microbatches N] [--bandwidth BYTES_PER_S]
                              [--spec GPU] [--method M] [--time-limit S] [--json] [--out F]

FILE is in Piper's input format (msr-fiddle/piper; an example: ``data/parallelize/``), or a
placement graph (``data/graphs/``, ``devplace profile``), which `devplace_lite.multidim.convert`
turns into Piper's model with Megatron-style tensor-parallel variants, for ``--spec``'s GPUs
(their memory, NVLink inside a node, the network between nodes); the options replace the
file's cluster values. The answer (`devplace_lite.solve.parallelize`; its JSON begins with the keys of every plan,
as ``devplace plan --json``'s does: method, status, objective, bound, gap, unit): the time per
sample (Piper's objective), its proven bound, the status (``optimal``, ``infeasible`` with the
reason, ``time_limit`` with the incumbent when ``--time-limit`` runs out, ``feasible`` with its
gap) and the stages (layers, data-parallel and tensor-parallel degrees, recomputed layers, memory).
Bad input: one line on stderr, exit status 2. torch is never imported.
"""

from __future__ import annotations

import argparse

from .. import options
from ..multidim.model import MAX_DEVICES
from . import emit

HELP = "plan data, tensor and pipeline parallelism together (Piper's model; its input format or a placement graph)"
EPILOG = """\
FILE is Piper's input format or a placement graph, told apart by content. Examples:

  devplace parallelize data/parallelize/bert_layer_training.json -k 64
  devplace parallelize data/graphs/gpt_layer_training.json -k 256 --spec H100
  devplace convert data/graphs/gpt_layer_training.json gpt.json --to piper --spec H100   # Piper's format
"""

_DEVICES = options.Int(1, MAX_DEVICES)
_MICROBATCHES = options.Int(1, 1 << 20)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..devices import SPECS
    from ..methods import PARALLELIZE

    parser.epilog, parser.formatter_class = EPILOG, argparse.RawDescriptionHelpFormatter
    parser.add_argument("file", help="a model in Piper's JSON input format, or a placement graph (examples below)")
    parser.add_argument("-k", "--accelerators", "--devices", dest="devices", type=_DEVICES,
                        help=f"accelerators, 1..{MAX_DEVICES} (default: the file's maxDevices; --devices is the old name)")
    parser.add_argument("--memory", type=options.MEMORY, help="bytes per device (default: the file's)")
    parser.add_argument("--microbatches", type=_MICROBATCHES, help="micro-batches per batch N (default: the file's)")
    parser.add_argument("--bandwidth", type=options.MEMORY, help="bytes per second per device (default: the file's)")
    parser.add_argument("--spec", choices=list(SPECS),
                        help="for a placement graph: the GPUs planned for (memory, NVLink, network); default: the "
                             "graph's memory and a V100 node's links")
    parser.add_argument("--method", choices=list(PARALLELIZE), default="exact",
                        help="; ".join(f"{name}: {m.summary}" for name, m in PARALLELIZE.items())
                        + " (default exact, proven optimal)")
    parser.add_argument("--time-limit", type=options.SECONDS, help="seconds for the whole command")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the JSON answer to this file")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ..files import check_output
    from ..solve import parallelize
    from ..progress import Progress, shown

    if args.out:
        check_output(args.out)
    with shown(not args.quiet), Progress(total=1000, desc="parallelize", unit="%") as bar:
        r = parallelize(args.file, devices=args.devices, memory=args.memory, microbatches=args.microbatches,
                        bandwidth=args.bandwidth, method=args.method, time_limit=args.time_limit, spec=args.spec,
                        progress=lambda f: bar.update(int(1000 * f)), started=getattr(args, "started", None))
    answer = r.to_dict()
    if emit(answer, args):
        return 0
    if r.objective is None:
        print(f"{r.method}: {r.status}: no plan ({r.reason})")
        return 0
    gap = "unknown" if r.gap is None else f"{100 * r.gap:.2g} %"
    bound = "none" if r.bound is None else f"{r.bound:.6g} s"
    print(f"{r.method}: {r.status}, time per sample {r.objective:.6g} s on "
          f"{answer['devices_used']} devices, {len(r.stages)} stage(s); proven bound {bound}, gap {gap}")
    for i, s in enumerate(r.stages):
        rec = f", recomputed {s.recomputed}" if s.recomputed else ""
        print(f"  stage {i}: layers {list(s.layers)}, d={s.data_parallel}, t={s.tensor_parallel}, "
              f"{s.time_per_sample:.6g} s/sample, {s.memory:.4g} bytes{rec}")
    if r.reason:
        print(f"  note: {r.reason}")
    return 0
