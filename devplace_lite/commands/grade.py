"""``devplace grade``: score a folder of submissions on the book's self-grading exercises.

    devplace grade SUBMISSIONS_DIR [--chapter 01] [--exercise 01.2 ...] [--timeout 30]
                   [--seed 0] [--jobs 1] [--json] [--details]
    devplace grade --list [--chapter 01]

Each entry of the folder (a ``.py`` file, a notebook ``.ipynb`` / ``.md``, or a folder of such
files) is one submission; it defines the exercise functions under the names ``--list`` prints.
Every submission runs in its own process with a time limit per exercise, so one that hangs
or crashes costs only its own marks. Output: a score table (share of instances right per
exercise, or ``n/a`` not attempted, ``missing``, ``timeout``, ``crashed``, ``error``), or with
``--json`` one object: ``exercises`` (id, name, title), ``seed``, ``timeout`` and
``submissions`` (name, files, total, notes, and per exercise id: status, score, message).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import options
from . import print_json

HELP = "grade a folder of exercise submissions (score table or --json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", nargs="?", help="folder of submissions (.py, .ipynb, .md, or one folder each)")
    parser.add_argument("--chapter", help="only this chapter's exercises (e.g. 01)")
    parser.add_argument("--exercise", action="append", help="only this exercise id (repeatable)")
    parser.add_argument("--timeout", type=options.SECONDS, default=30.0, help="seconds per exercise (default 30)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="seed of the instances (default 0, as in the book)")
    parser.add_argument("--jobs", type=options.WORKERS, default=1, help="submissions graded at once (default 1)")
    parser.add_argument("--details", action="store_true", help="print each failure's feedback under the table")
    parser.add_argument("--list", action="store_true", help="list the exercises and the function names to define")
    parser.add_argument("--json", action="store_true")


def _select(args: argparse.Namespace) -> list:
    from ..exercises import exercises, get
    from ..graph import GraphError

    if args.chapter is not None and not str(args.chapter).isdigit():
        raise GraphError(f"--chapter must be a chapter number such as 01, got {args.chapter!r}")
    chosen = exercises(args.chapter)
    if args.exercise:
        wanted = [get(i) for i in args.exercise]
        chosen = [e for e in wanted if args.chapter is None or e in chosen]
    if not chosen:
        raise GraphError(f"no exercises registered for chapter {args.chapter}" if args.chapter
                         else "no exercises selected")
    return chosen


def run(args: argparse.Namespace) -> int:
    from ..exercises.grading import grade_folder, table
    from ..graph import GraphError

    chosen = _select(args)
    listing = [{"id": e.id, "name": e.name, "title": e.title, "instances": e.n} for e in chosen]
    if args.list:
        if args.json:
            print_json({"exercises": listing})
        else:
            for e in listing:
                print(f"{e['id']:6s} {e['name']:22s} {e['title']}")
        return 0
    if args.submissions is None:
        raise GraphError("grade: give the folder of submissions (or --list)")
    subs = grade_folder(Path(args.submissions), chosen, timeout=args.timeout, seed=args.seed, jobs=args.jobs)
    if args.json:
        print_json({"exercises": listing, "seed": args.seed, "timeout": args.timeout,
                   "submissions": [s.to_dict() for s in subs]})
        return 0
    if not subs:
        print(f"no submissions (.py, .ipynb, .md) in {args.submissions}")
        return 0
    print(table(subs, chosen))
    if args.details:
        for s in subs:
            lines = [r["message"] for r in s.results.values() if r["status"] != "passed"] + s.notes
            if lines:
                print(f"\n{s.name}:")
                print("\n".join("  " + ln.replace("\n", "\n  ") for ln in lines))
    return 0
