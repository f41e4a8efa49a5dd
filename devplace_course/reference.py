"""The authors' published workloads (Tarnawski et al. 2020, MIT licence): where to find them and
how to fetch them.

The project never ships these files. Tests, benchmarks and chapters look for them in

1. the folder named by the environment variable ``DEVPLACE_REFERENCE``;
2. ``../shared/reference/msr-dnn-partitioning`` beside the checkout;

and skip what needs them, saying why, when neither holds them. ``make reference`` fetches them
from the authors' public repository, at the commit the book was checked against, into
``build/reference/msr-dnn-partitioning`` (an ignored folder); point ``DEVPLACE_REFERENCE`` there.

Piper's published inputs (Tarnawski et al. 2021, MIT licence), which chapter 09's planner is
checked against, are found the same way: ``DEVPLACE_PIPER``, else ``../shared/reference/msr-piper``
(`piper_dir`); ``make reference`` fetches them too (``--piper``).

Usage::

    python -m devplace_course.reference [DEST] [--url URL] [--commit SHA]
    python -m devplace_course.reference --piper [DEST]

Only ``git`` is needed. ``--url`` may be any URL git can clone (the tests use a local stand-in).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .checkout import find_checkout

#: The authors' public repository and the commit whose files the book was checked against.
URL = "https://github.com/msr-fiddle/dnn-partitioning"
COMMIT = "b207b6ad27a1407d321f1e028cea96d7f2c90e3e"
#: What the project reads from it: the workloads, the experts' splits and the licence.
PARTS = ("throughput-inputs", "latency-inputs", "human-experts", "LICENSE.txt")
NAME = "msr-dnn-partitioning"
#: Where ``make reference`` puts them: the checkout's build folder (or the current folder's).
DEFAULT_DEST = (find_checkout() or Path.cwd()) / "build" / "reference" / NAME
#: Piper's public repository, the commit its inputs were checked at, and what is read from it.
PIPER_URL = "https://github.com/msr-fiddle/piper"
PIPER_COMMIT = "d7fc8cf91048f4b71dc2f9182fa14ebf720c016e"
PIPER_PARTS = ("inputs", "LICENSE.txt")
PIPER_NAME = "msr-piper"
#: The one sentence a test or a chapter prints when the files are not there.
MISSING = ("the authors' published workloads are not on this machine: run `make reference` and set "
           "DEVPLACE_REFERENCE to the folder it prints")


def reference_dir(kind: str | None = None) -> Path | None:
    """The folder of the authors' workloads (or its ``kind`` subfolder, e.g. ``"throughput-inputs"``),
    or ``None`` when neither ``DEVPLACE_REFERENCE`` nor ``shared/reference`` beside the checkout
    holds them.

    Examples
    --------
    >>> d = reference_dir("throughput-inputs")
    >>> d is None or (d / "LayerGraphs").is_dir()
    True
    """
    env = os.environ.get("DEVPLACE_REFERENCE")
    candidates = [Path(env)] if env else []
    root = find_checkout()
    if root is not None:
        candidates.append(root.parent / "shared" / "reference" / NAME)
    for base in candidates:
        if (base / "throughput-inputs").is_dir():
            return base / kind if kind else base
    return None


def piper_dir() -> Path | None:
    """The folder of Piper's published inputs (it holds ``inputs/``), or ``None`` when neither
    ``DEVPLACE_PIPER`` nor ``shared/reference/msr-piper`` beside the checkout holds them."""
    env = os.environ.get("DEVPLACE_PIPER")
    root = find_checkout()
    candidates = ([Path(env)] if env else []) + ([root.parent / "shared" / "reference" / PIPER_NAME] if root else [])
    return next((base for base in candidates if (base / "inputs").is_dir()), None)


def fetch(dest: Path = DEFAULT_DEST, url: str = URL, commit: str = COMMIT, parts: tuple[str, ...] = PARTS) -> Path:
    """Clone ``url``, check out ``commit`` and copy ``parts`` (default :data:`PARTS`) into ``dest``
    (replacing it whole, only once everything is in place). Returns ``dest``.

    Raises
    ------
    RuntimeError
        When git is missing, the clone fails or the commit lacks one of the parts; ``dest`` is
        then left as it was.
    """
    if shutil.which("git") is None:
        raise RuntimeError("git is not installed; it is needed to fetch the authors' workloads")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        clone = Path(tmp) / "clone"
        for what, cmd in ((f"git clone of {url}", ["git", "clone", "--quiet", "--no-checkout", url, str(clone)]),
                          (f"checkout of commit {commit}", ["git", "-C", str(clone), "checkout", "--quiet", "--detach",
                                                            commit])):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"{what} failed: {last[0]}")
        missing = [p for p in parts if not (clone / p).exists()]
        if missing:
            raise RuntimeError(f"commit {commit[:7]} of {url} has no {', '.join(missing)}")
        staged = Path(tmp) / "staged"
        staged.mkdir()
        for part in parts:
            src = clone / part
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, staged / part)
        (staged / "SOURCE_COMMIT").write_text(commit + "\n")
        old = Path(tmp) / "old"
        if dest.exists():
            dest.rename(old)
        staged.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fetch the authors' published workloads (never copied into the project).")
    ap.add_argument("dest", nargs="?", type=Path, default=None)
    ap.add_argument("--piper", action="store_true", help="Piper's inputs instead (chapter 09)")
    ap.add_argument("--url", default=None, help="repository to clone (default: the authors' public one)")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    url, commit, parts, name, env = ((PIPER_URL, PIPER_COMMIT, PIPER_PARTS, PIPER_NAME, "DEVPLACE_PIPER") if args.piper
                                     else (URL, COMMIT, PARTS, NAME, "DEVPLACE_REFERENCE"))
    dest = args.dest or DEFAULT_DEST.parent / name
    try:
        dest = fetch(dest, args.url or url, args.commit or commit, parts)
    except RuntimeError as e:
        print(f"devplace reference: {e}", file=sys.stderr)
        return 2
    print(f"the published files are in {dest}\nexport {env}={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
