"""``devplace convert IN OUT [--to native|msr]``: between the native and the authors' JSON (the
input format is read from the content)."""

from __future__ import annotations

import argparse
import sys

from ..io import load_graph, save_graph

HELP = "convert between the native and the authors' (msr) JSON"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--to", choices=["native", "msr"], default="native")


def run(args: argparse.Namespace) -> int:
    g = load_graph(args.input)
    save_graph(g, args.output, to=args.to)
    print(f"wrote {args.output} ({args.to}, {g.n} nodes, {g.m} edges)", file=sys.stderr)
    return 0
