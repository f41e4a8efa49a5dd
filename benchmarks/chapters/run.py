"""How long each chapter takes to run, in FAST mode (what `make test` runs) and in full mode
(what `make book` runs). Writes results.json, the table in this folder's README.md and the time
table of the top-level README.md.

    python -m benchmarks.chapters.run                 # both modes, two chapters at a time
    python -m benchmarks.chapters.run --mode fast     # one mode only (the other's figures are kept)
    python -m benchmarks.chapters.run --jobs 1 03 05  # some chapters, one at a time

Each chapter is executed the way the book executes it: read with jupytext, run top to bottom by
a fresh kernel (nbclient) in the chapters folder, matplotlib's inline backend. A chapter that
fails is recorded as failed with its error's last line, and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CHAPTERS = ROOT / "chapters"
RESULTS = HERE / "results.json"
MODES = ("fast", "full")


def run_chapter(md: Path, mode: str) -> dict:
    """Execute one chapter in one mode; its wall time in seconds, or the error that stopped it."""
    import tempfile

    from devplace_course.book import execute, kernel_env

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        error = execute(md, Path(tmp) / f"{md.stem}.ipynb", kernel_env(mode == "fast"), CHAPTERS, timeout=3600)
        seconds = time.perf_counter() - t0
    if error:
        lines = [ln for ln in error.strip().splitlines() if ln.strip()]
        error = lines[-1][:300] if lines else "cell failed"
    return {"seconds": round(seconds, 1), "error": error}


def chapter_files(wanted: list[str]) -> list[Path]:
    files = sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))
    if wanted:
        unknown = set(wanted) - {f.name[:2] for f in files}
        if unknown:
            raise SystemExit(f"no chapter numbered {', '.join(sorted(unknown))}")
        files = [f for f in files if f.name[:2] in wanted]
    return files


def fmt(rec: dict | None) -> str:
    if rec is None:
        return "-"
    if rec["error"]:
        return "failed"
    s = rec["seconds"]
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def table(results: dict) -> str:
    rows = ["| chapter | FAST run | full run |", "| --- | ---: | ---: |"]
    for stem in sorted(results["chapters"]):
        rec = results["chapters"][stem]
        rows.append(f"| {stem[:2]} | {fmt(rec.get('fast'))} | {fmt(rec.get('full'))} |")
    total = {m: sum(r[m]["seconds"] for r in results["chapters"].values() if r.get(m)) for m in MODES}
    rows.append(f"| all, one after another | {total['fast'] / 60:.1f} min | {total['full'] / 60:.1f} min |")
    return "\n".join(rows)


def replace_block(path: Path, start: str, end: str, body: str) -> None:
    text = path.read_text()
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: markers {start} ... {end} not found")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(pattern.sub(lambda _: f"{start}\n{body}\n{end}", text))
    os.replace(tmp, path)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", help="chapter numbers (default: all)")
    ap.add_argument("--mode", choices=("fast", "full", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=2, help="chapters run at a time (default 2, as CI)")
    args = ap.parse_args(argv)
    modes = MODES if args.mode == "both" else (args.mode,)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"chapters": {}}
    jobs = [(md, mode) for mode in modes for md in chapter_files(args.chapters)]

    def one(job):
        md, mode = job
        rec = run_chapter(md, mode)
        print(f"{md.stem} {mode}: {fmt(rec)}" + (f" ({rec['error']})" if rec["error"] else ""), flush=True)
        return md.stem, mode, rec

    load = [os.getloadavg()[0]]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for stem, mode, rec in pool.map(one, jobs):
            results["chapters"].setdefault(stem, {})[mode] = rec
            load.append(os.getloadavg()[0])
    results.update(machine=f"{cpu_name()}, {os.cpu_count()} cores",
                   python=platform.python_version(), jobs=args.jobs, date=date.today().isoformat(),
                   command="python -m benchmarks.chapters.run",
                   load=f"{min(load):.1f} to {max(load):.1f}")
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, RESULTS)
    note = (f"Measured by `python -m benchmarks.chapters.run` on {results['machine']}, "
            f"{results['jobs']} chapters at a time, {results['date']}, one-minute load average "
            f"{results['load']} during the run (the machine was shared; on a quiet one expect less).")
    body = table(results) + "\n\n" + note
    replace_block(HERE / "README.md", "<!-- table -->", "<!-- end -->", body)
    replace_block(ROOT / "README.md", "<!-- chapter-times -->", "<!-- end chapter-times -->", body)


if __name__ == "__main__":
    main()
