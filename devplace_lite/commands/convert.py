"""``devplace convert IN OUT [--to native|msr|piper] [--spec GPU]``: between the native and the
authors' JSON (the input format is read from the content), or a placement graph into Piper's
input format (`devplace_lite.multidim.convert.from_graph`: Megatron-style tensor-parallel
variants for ``--spec``'s GPUs), which ``devplace parallelize`` reads."""

from __future__ import annotations

import argparse
import sys

from .. import options
from ..errors import UsageError
from ..files import check_output
from ..io import load_graph, save_graph, write_json_atomic
from ..multidim.model import MAX_DEVICES

HELP = "convert between the native and the authors' (msr) JSON, or a graph into Piper's format"


def add_arguments(s: argparse.ArgumentParser) -> None:
    from ..devices import SPECS

    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--to", choices=["native", "msr", "piper"], default="native")
    s.add_argument("--spec", choices=list(SPECS), help="with --to piper: the GPUs planned for (memory, NVLink, network)")
    s.add_argument("-k", "--devices", type=options.Int(1, MAX_DEVICES), default=8,
                   help="with --to piper: the devices the file carries (maxDevices, default 8)")


def run(args: argparse.Namespace) -> int:
    if args.to != "piper" and (args.spec is not None or args.devices != 8):
        raise UsageError("--spec and --devices describe Piper's cluster: they go with --to piper")
    check_output(args.output)
    g = load_graph(args.input)
    if args.to == "piper":
        from ..multidim.convert import from_graph
        from ..multidim.model import model_to_dict

        write_json_atomic(args.output, model_to_dict(from_graph(g, spec=args.spec, devices=args.devices)))
    else:
        save_graph(g, args.output, to=args.to)
    print(f"wrote {args.output} ({args.to}, {g.n} nodes, {g.m} edges)", file=sys.stderr)
    return 0
