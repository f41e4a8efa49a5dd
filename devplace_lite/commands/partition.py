"""``devplace partition GRAPH --method M``: minimise the largest device load (throughput), certified by the library's
front door (`devplace_lite.solve`); the options and the answer are `devplace_lite.commands._solve`'s."""

from __future__ import annotations

import argparse

from .. import methods
from . import _solve

HELP = "minimise the largest device load (throughput)"


def add_arguments(s: argparse.ArgumentParser) -> None:
    _solve.add_arguments(s, methods.PARTITION)


def run(args: argparse.Namespace) -> int:
    return _solve.answer(methods.PARTITION, args)
