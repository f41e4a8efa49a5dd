"""`make reference`: fetching the authors' published workloads, tested against a local stand-in of
their repository (a bare git repository reached by a file:// URL; never the network)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devplace_course import reference
from devplace_course.checkout import find_checkout

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def stand_in(tmp_path) -> tuple[str, str, str]:
    """A repository laid out like the authors' (two commits: the first lacks the experts' splits);
    returns (file URL of its bare clone, first commit, second commit)."""
    work = tmp_path / "work"
    (work / "throughput-inputs" / "LayerGraphs").mkdir(parents=True)
    (work / "latency-inputs" / "LayerGraphs").mkdir(parents=True)
    graph = {"maxFPGAs": 2, "maxCPUs": 1, "maxSizePerFPGA": 1e9, "nodes": [], "edges": []}
    (work / "throughput-inputs" / "LayerGraphs" / "tiny_inference.json").write_text(json.dumps(graph))
    (work / "latency-inputs" / "LayerGraphs" / "tiny_inference.json").write_text(json.dumps(graph))
    (work / "LICENSE.txt").write_text("MIT License\n")
    (work / "throughput-dp").mkdir()
    (work / "throughput-dp" / "dp.cpp").write_text("// their program: never copied\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "human-experts").mkdir()
    (work / "human-experts" / "tiny_expert.json").write_text("{}")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "experts", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "stand-in.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare.as_uri(), first, second


def test_fetch_copies_the_workloads_at_the_commit(stand_in, tmp_path):
    url, _, commit = stand_in
    dest = reference.fetch(tmp_path / "ref" / reference.NAME, url=url, commit=commit)
    assert (dest / "throughput-inputs" / "LayerGraphs" / "tiny_inference.json").exists()
    assert (dest / "human-experts" / "tiny_expert.json").exists() and (dest / "LICENSE.txt").exists()
    assert (dest / "SOURCE_COMMIT").read_text().strip() == commit
    assert not (dest / "throughput-dp").exists() and not (dest / ".git").exists()  # workloads only
    assert sorted(p.name for p in dest.iterdir()) == sorted([*reference.PARTS, "SOURCE_COMMIT"])


def test_fetch_fails_whole_and_leaves_the_old_copy(stand_in, tmp_path):
    url, first, second = stand_in
    dest = reference.fetch(tmp_path / reference.NAME, url=url, commit=second)
    before = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    with pytest.raises(RuntimeError, match="human-experts"):
        reference.fetch(dest, url=url, commit=first)          # a commit without the experts' splits
    with pytest.raises(RuntimeError, match="checkout"):
        reference.fetch(dest, url=url, commit="0" * 40)      # no such commit
    with pytest.raises(RuntimeError, match="clone"):
        reference.fetch(dest, url=(tmp_path / "nowhere.git").as_uri(), commit=second)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == before
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith("tmp")] == []  # no half-written leftovers


def test_command_line(stand_in, tmp_path):
    url, _, commit = stand_in
    dest = tmp_path / "out" / reference.NAME
    r = subprocess.run([sys.executable, "-m", "devplace_course.reference", str(dest), "--url", url, "--commit", commit],
                       capture_output=True, text=True)
    assert r.returncode == 0 and f"export DEVPLACE_REFERENCE={dest}" in r.stdout
    r = subprocess.run([sys.executable, "-m", "devplace_course.reference", str(dest), "--url", url, "--commit", "f" * 40],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("devplace reference:")


def test_reference_dir_reads_the_environment_first(stand_in, tmp_path, monkeypatch):
    url, _, commit = stand_in
    dest = reference.fetch(tmp_path / reference.NAME, url=url, commit=commit)
    monkeypatch.setenv("DEVPLACE_REFERENCE", str(dest))
    assert reference.reference_dir() == dest
    assert reference.reference_dir("throughput-inputs") == dest / "throughput-inputs"
    monkeypatch.setenv("DEVPLACE_REFERENCE", str(tmp_path / "empty"))
    shared = find_checkout().parent / "shared" / "reference" / reference.NAME
    expected = shared if (shared / "throughput-inputs").is_dir() else None
    assert reference.reference_dir() == expected      # falls back to ../shared, else None


def test_the_piper_fetch_takes_its_inputs_and_licence_only_and_piper_dir_finds_them(tmp_path, monkeypatch):
    work = tmp_path / "piper"
    (work / "inputs").mkdir(parents=True)
    (work / "inputs" / "gnmt.json").write_text("{}")
    (work / "LICENSE.txt").write_text("MIT License\n")
    (work / "algo.cpp").write_text("// their program: never copied\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "inputs", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    dest = tmp_path / "ref" / reference.PIPER_NAME
    r = subprocess.run([sys.executable, "-m", "devplace_course.reference", "--piper", str(dest), "--url", work.as_uri(),
                        "--commit", commit], capture_output=True, text=True)
    assert r.returncode == 0 and f"export DEVPLACE_PIPER={dest}" in r.stdout, r.stderr
    assert sorted(p.name for p in dest.iterdir()) == sorted([*reference.PIPER_PARTS, "SOURCE_COMMIT"])
    monkeypatch.setenv("DEVPLACE_PIPER", str(dest))
    assert reference.piper_dir() == dest
