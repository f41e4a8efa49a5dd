"""Shared fixtures: the authors' published workloads (read from ../shared, never copied) and
small seeded graphs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devplace_course import reference

ROOT = Path(__file__).resolve().parent.parent
#: DEVPLACE_REFERENCE, else ../shared/reference/msr-dnn-partitioning; a path that holds nothing when neither does
REFERENCE = reference.reference_dir() or ROOT.parent / "shared" / "reference" / reference.NAME


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The authors' workloads (DEVPLACE_REFERENCE, else ../shared/reference); skips when absent."""
    found = reference.reference_dir()
    if found is None:
        pytest.skip(reference.MISSING)
    return found


def reference_files(kind: str = "throughput-inputs") -> list[Path]:
    """Workload files for parametrisation (empty when ../shared is absent; tests using the
    `reference_dir` fixture then skip with the reason)."""
    return sorted((REFERENCE / kind).glob("*/*.json")) if (REFERENCE / kind).is_dir() else []


@pytest.fixture(scope="session")
def bwrap() -> str:
    """A working bubblewrap for the grader's sandbox: Debian's ``bubblewrap`` package, installed
    here when missing and running as root (as the book test does with Chromium); skips, saying
    why, only where it cannot be had or cannot start a sandbox."""
    import shutil
    import subprocess

    from devplace_course.exercises.sandbox import SandboxUnavailable, require_sandbox

    if shutil.which("bwrap") is None:
        if not shutil.which("apt-get"):
            pytest.skip("bubblewrap (bwrap) is not installed and there is no apt-get to install it with")
        if os.geteuid() != 0:
            pytest.skip("bubblewrap (bwrap) is not installed and installing it needs root (apt-get install bubblewrap)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for step in (["apt-get", "install", "-y", "-q", "bubblewrap"], ["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "bubblewrap"]):
            if step[1] == "update" and shutil.which("bwrap"):
                break
            subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
    try:
        found = require_sandbox()
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    return found


@pytest.fixture
def reach(monkeypatch):
    """``reach(registry, name, limit)``: the registry entry's reach made ``limit`` for one test
    (the code that enforces a reach reads it from the entry, `devplace_lite.methods.Reach`)."""
    from dataclasses import replace

    def shrink(registry: dict, name: str, limit: int) -> None:
        entry = registry[name]
        monkeypatch.setitem(registry, name, replace(entry, reach=replace(entry.reach, limit=limit)))

    return shrink
