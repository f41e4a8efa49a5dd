"""The README's shell commands, run as a newcomer types them: in a new shell, in a fresh copy of
the project, one block after another, each line as written. What must hold: every command
succeeds, nothing is written outside ``build/`` (and the temp folder a block makes), and every
command that writes says what and where.

Stand-ins, each stated: ``make`` targets are not run (they build the environment, the book or
the benchmarks: minutes to an hour, and ``make test`` runs this test itself); ``.venv`` is the
environment running this test, seen through ``.venv/bin/activate``, ``devplace``, ``python``
and ``torchrun`` scripts that the test writes into the copy (``make install`` writes the real
ones). torchrun's default port is replaced by a free one (``PET_MASTER_PORT``), so a test
beside this one cannot collide with it."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Commands not run, by their first word, and why.
SKIPPED = {"make": "a make target builds the environment, the book or the benchmarks (minutes to an hour); "
                   "`make test` runs this test itself"}


def shell_blocks(text: str) -> list[str]:
    """The bodies of the README's fenced ``bash`` blocks, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def runnable(block: str) -> tuple[str, list[str]]:
    """``block`` with each skipped command replaced by a no-op that says why, and the skipped
    lines. A here-document's body is never mistaken for a command."""
    out, skipped, until = [], [], None
    for line in block.splitlines():
        if until is not None:
            out.append(line)
            until = None if line == until else until
            continue
        word = line.split()[0] if line.split() else ""
        if word in SKIPPED:
            skipped.append(line)
            out.append(": " + shlex.quote(f"skipped {line.split('#')[0].strip()}: {SKIPPED[word]}"))
            continue
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
        until = heredoc.group(1) if heredoc else None
        out.append(line)
    return "\n".join(out) + "\n", skipped


def test_the_readme_blocks_are_found_and_only_make_is_skipped():
    blocks = shell_blocks(README.read_text())
    assert len(blocks) >= 3
    script, skipped = runnable("\n".join(blocks))
    assert skipped and all(line.split()[0] == "make" for line in skipped)
    assert "devplace plan mynet:build" in script and "import torchvision" in script


def _stand_in_venv(clone: Path) -> None:
    """``.venv/bin`` of the copy: activate, devplace, python and torchrun on this interpreter."""
    bin_ = clone / ".venv" / "bin"
    bin_.mkdir(parents=True)
    py = sys.executable
    path = f'PYTHONPATH="{clone}${{PYTHONPATH:+:$PYTHONPATH}}"'
    scripts = {
        "activate": f'export VIRTUAL_ENV="{clone / ".venv"}"\nexport PATH="{bin_}:$PATH"\n',
        "devplace": f'#!/bin/sh\n{path} exec "{py}" -c "import sys; from devplace_lite.cli import main; '
                    'sys.exit(main())" "$@"\n',
        "python": f'#!/bin/sh\n{path} exec "{py}" "$@"\n',
        "torchrun": f'#!/bin/sh\n{path} exec "{py}" -m torch.distributed.run "$@"\n',
    }
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod((bin_ / name).stat().st_mode | stat.S_IXUSR)


def test_every_readme_command_runs_as_written_in_a_fresh_copy(tmp_path):
    for name in ("torch", "torchvision"):  # find, not import: torchvision's import is what the README explains
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (make installs it)")
    from devplace_lite.pipeline.resources import free_port

    clone = tmp_path / "devplace_lite-clone"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".venv", "build", ".git", "__pycache__", "*.egg-info",
                                                               ".pytest_cache", ".hypothesis"))
    _stand_in_venv(clone)
    before = {p.name for p in clone.iterdir()}
    script, _ = runnable("\n".join(shell_blocks(README.read_text())))
    temp = tmp_path / "tmp"
    temp.mkdir()
    # a new shell: no virtual environment active, nothing of this test's import path
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(TMPDIR=str(temp), PET_MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=1500)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    assert {p.name for p in clone.iterdir()} - before == {"build"}, "a README command wrote outside build/"
    for path in ("build/bert_msr.json", "build/split.json", "build/resnet.json"):
        assert (clone / path).is_file() and f"wrote {path}" in said, path
    assert "build/plan/plan.json (the plan), build/plan/graph.json (the segments' graph)" in said
    assert re.search(r"^gpt: .*, 2 stage\(s\) of k=2 by ", said, re.M), said[-3000:]  # the example runs a pipeline
    mine = next(p.parent for p in temp.glob("*/mynet.py"))  # the folder `cd "$(mktemp -d)"` made
    assert {p.name for p in (mine / "plan").iterdir()} >= {"plan.json", "graph.json", "run_pipeline.py", "run"}
    assert "plan/plan.json (the plan), plan/graph.json (the segments' graph)" in said
    assert re.search(r"run_pipeline: 2 stages, 1f1b, 4 micro-batches of 2: step [\d.]+ ms wall .*, loss [\d.e+-]+; "
                     r"per-rank JSON in \S*plan/run/rank0\.json \.\. rank1\.json", said), said[-3000:]
