"""``devplace grade``: mark a folder of submissions on the book's self-grading exercises.

    devplace grade SUBMISSIONS_DIR (--seed N | --seed-file F) [--course course.toml]
                   [--chapter 01] [--exercise 01.2 ...] [--timeout 30] [--load-timeout 120]
                   [--jobs 1] [--csv sheet.csv] [--results-json PATH] [--json] [--details]
                   [--unsafe-no-sandbox]
    devplace grade --list [--chapter 01]

Each entry of the folder (a ``.py`` file, a notebook ``.ipynb`` / ``.md``, or a folder of such
files) is one submission; it defines the exercise functions under the names ``--list`` prints.
Every submission runs in a bubblewrap sandbox (see `devplace_course.exercises.sandbox`) on
instances drawn from the instructor's secret seed, and its answers are checked outside it.
Grading refuses to start without ``bwrap`` unless ``--unsafe-no-sandbox`` is given.

Output: how the submissions were contained, then a table of points per exercise (or why none:
``n/a`` not attempted, ``missing``, ``timeout``, ``memory``, ``output``, ``crashed``, ``COPY``)
and the total, then what to look at (copies, runaways, code to review); ``--details`` adds every
failure's feedback. ``--json``: one object with ``exercises``, ``timeout``, ``load_timeout``,
``sandbox`` and ``submissions`` (name, files, total, notes, review, and per exercise id: status,
score, points, max_points, message); the seed is never printed. ``--csv`` writes the grade sheet
(one row per submission, one column per exercise, the total), ``--results-json`` Gradescope's
``results.json`` (a file for one submission, a folder of them for several).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from devplace_lite import options
from devplace_lite.commands import print_json

HELP = "grade a folder of exercise submissions, sandboxed, on your secret instances"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", nargs="?", help="folder of submissions (.py, .ipynb, .md, or one folder each)")
    parser.add_argument("--seed", type=options.SEED, default=None, help="your secret seed of the grading instances (not 0, the book's)")
    parser.add_argument("--seed-file", default=None, help="a file holding your secret seed (a number or any text)")
    parser.add_argument("--course", default=None, help="course file (TOML): exercises, points, pass thresholds, limits")
    parser.add_argument("--chapter", help="only this chapter's exercises (e.g. 01)")
    parser.add_argument("--exercise", action="append", help="only this exercise id (repeatable)")
    parser.add_argument("--timeout", type=options.SECONDS, default=None, help="seconds per exercise (default 30)")
    parser.add_argument("--load-timeout", type=options.SECONDS, default=None,
                        help="seconds to load a submission: imports, notebook set-up (default 120)")
    parser.add_argument("--jobs", type=options.WORKERS, default=1, help="submissions graded at once (default 1)")
    parser.add_argument("--csv", default=None, help="write the grade sheet here (one row per submission)")
    parser.add_argument("--results-json", default=None, help="write Gradescope results.json here")
    parser.add_argument("--details", action="store_true", help="print each failure's feedback under the table")
    parser.add_argument("--list", action="store_true", help="list the exercises and the function names to define")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without bubblewrap (submissions can then read and change your files)")
    parser.add_argument("--json", action="store_true")


def _select(args: argparse.Namespace, course) -> list:
    from devplace_lite.errors import UsageError
    from .exercises import exercises, get

    if args.chapter is not None and not str(args.chapter).isdigit():
        raise UsageError(f"--chapter must be a chapter number such as 01, got {args.chapter!r}")
    chosen = [get(i) for i in course.marks] if course.marks else exercises()
    if args.chapter is not None:
        chosen = [e for e in chosen if e.chapter == f"{int(args.chapter):02d}"]
    if args.exercise:
        wanted = [get(i) for i in args.exercise]
        chosen = [e for e in wanted if e in chosen]
    if not chosen:
        raise UsageError(f"no exercises registered for chapter {args.chapter}" if args.chapter else "no exercises selected")
    return chosen


def _check_outputs(args: argparse.Namespace, subs: list, seed_file) -> None:
    """Before any grading: every file ``--csv`` and ``--results-json`` will write is checked as
    every command checks its outputs (`devplace_lite.files`: names a file, not a device or FIFO,
    its folder exists) and is none of the inputs: not the course or seed file, not inside the
    submissions folder (the command line checked ``--csv`` already, but not against the course's
    seed file)."""
    from .exercises.grading import results_paths
    from devplace_lite.files import check_apart, check_output

    inputs = [p for p in (args.submissions, args.course, seed_file) if p is not None]
    outputs = [args.csv] if args.csv is not None else []  # as spelled: Path() would drop a trailing /
    if args.results_json == "":
        check_output(args.results_json)  # Path("") is ".", the current folder
    if args.results_json is not None:
        folder = Path(args.results_json)
        targets = results_paths([s.name for s in subs], folder) if subs else []
        if targets != [folder]:  # a folder of results (made when missing): it must not be an input either
            check_apart(folder, inputs)
        outputs += [t for t in targets if t.parent.is_dir() or t == folder]
    for out in outputs:
        check_output(out)
        check_apart(out, inputs)


def run(args: argparse.Namespace) -> int:
    from devplace_lite.errors import UsageError
    from .exercises.course import Course, load_course
    from .exercises.grading import Plan, csv_text, discover, flags, grade_folder, header, resolve_seed, table, write_results
    from devplace_lite.files import write_text_atomic

    course = load_course(args.course) if args.course else Course()
    chosen = _select(args, course)
    listing = [{"id": e.id, "name": e.name, "title": e.title, "instances": e.n,
                "points": course.mark(e.id).points} for e in chosen]
    if args.list:
        if args.json:
            print_json({"exercises": listing})
        else:
            for e in listing:
                print(f"{e['id']:6s} {e['name']:22s} {e['title']}")
        return 0
    if args.submissions is None:
        raise UsageError("grade: give the folder of submissions (or --list)")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    seed_file = args.seed_file if args.seed_file is not None or args.seed is not None else course.seed_file
    _check_outputs(args, discover(Path(args.submissions)), seed_file)
    plan = Plan(chosen, resolve_seed(args.seed, seed_file),
                timeout=args.timeout if args.timeout is not None else course.timeout or 30.0,
                load_timeout=args.load_timeout if args.load_timeout is not None else course.load_timeout or 120.0,
                limits=course.limits, course=course, unsafe=args.unsafe_no_sandbox)
    subs = grade_folder(Path(args.submissions), plan, jobs=args.jobs)
    if args.csv:
        write_text_atomic(args.csv, csv_text(subs, plan))
    if args.results_json and subs:
        write_results(subs, plan, args.results_json)  # as spelled: a trailing / asks for a folder
    if args.json:
        print_json({"exercises": listing, "timeout": plan.timeout, "load_timeout": plan.load_timeout,
                    "sandbox": header(plan), "submissions": [s.to_dict() for s in subs]})
        return 0
    print(header(plan))
    if not subs:
        print(f"no submissions (.py, .ipynb, .md) in {args.submissions}")
        return 0
    print()
    print(table(subs, plan))
    flagged = [(s.name, flags(s)) for s in subs if flags(s)]
    if flagged:
        print("\nto look at:")
        for name, text in flagged:
            print(f"  {name}: {text}")
    if args.details:
        for s in subs:
            lines = [r["message"] for r in s.results.values() if r["status"] != "passed"] + s.notes
            if lines:
                print(f"\n{s.name}:")
                print("\n".join("  " + ln.replace("\n", "\n  ") for ln in lines))
    if args.csv:
        print(f"\ngrade sheet written to {args.csv}")
    return 0
