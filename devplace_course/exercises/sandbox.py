"""The sandbox a submission runs in: a bubblewrap namespace, resource limits, and a kill at the end.

One `Session` is one worker process (`devplace_course.exercises.worker`) for one submission, run
as a separate process tree inside ``bwrap`` (Debian's ``bubblewrap`` package):

* **What it sees.** A new root holding only, read-only: ``/usr`` and the system libraries, the
  Python installation and its environment, the ``devplace_lite`` package, and the one submission
  (a staged copy at ``/submission``: regular files only, symbolic links dropped); a private
  writable ``/tmp`` of fixed size; a fresh ``/proc`` and a minimal ``/dev``. Not the instructor's
  home, answer keys, the book's solutions, other submissions, or anything else of the machine.
* **What it can reach.** A new network namespace (no interface but its own loopback: no
  network, no listener of the machine), new PID, IPC and UTS namespaces, a clean environment.
* **Limits** (`Limits`), set by the worker before any submission code runs and inherited by every
  process it starts: address space per process, CPU seconds per process, processes, the size
  of a file written, open files, no core dumps; the private ``/tmp`` has a size. When the grader
  runs as root it creates a cgroup per session (v1 or v2, where the machine lets it) for the
  memory and the number of processes of the whole tree, and the worker gives up root for an
  unprivileged uid of its own (as root the process limit would not hold). The folders above
  those shown are made anew, open to all, so a checkout below a folder only root may enter
  (``mktemp -d``) grades as any other; one whose own files others cannot read (umask 077) is
  refused with the ``chmod`` that opens it. A worker that ends before it is ready (its own
  imports done, no submission code run) is the grader's failure: `WorkerFailed`, one line,
  never a student's zero. The grader caps what
  the submission prints, and the time of loading and of each exercise on a `RunClock`: wall
  time less the time the worker sat runnable waiting for a CPU (the kernel's run-queue wait), so
  that a busy machine does not turn a quick answer into a timeout, while an endless loop and a
  sleep both run the clock; and never more than `WALL_FACTOR` times the budget of wall time.
* **The end.** The session's process tree is killed: ``bwrap`` with ``--die-with-parent`` holds
  the PID namespace, and killing it (and the cgroup's processes) ends every process inside,
  ``setsid`` daemons included.

Where ``bwrap`` is missing (macOS, Windows) or cannot start, grading refuses to run unless the
instructor passes ``unsafe=True`` (``--unsafe-no-sandbox``): the worker then runs as a plain
child process with the same limits and protocol, and can read and write what the grader can
(as root: an unprivileged uid that keeps only the right to read, so it imports this package
wherever it lives).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devplace_lite.errors import DevplaceError, UsageError
from .worker import write_frame

MIB = 1 << 20
#: the environment inside; nothing of the grader's own environment goes in
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
       "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg",
       "MPLCONFIGDIR": "/tmp/.matplotlib", "NUMBA_CACHE_DIR": "/tmp/.numba", "DEVPLACE_FAST": "1",
       "DEVPLACE_GRADING": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1"}
_STAGE_LIMIT = 64 * MIB  # at most this much of a submission is staged
#: A budget of t seconds on a submission's clock ends after at most this many times t of wall time.
WALL_FACTOR = 3.0
_UIDS = iter(range(1 << 30))
_UID_LOCK = threading.Lock()
#: The sessions of this process whose worker is running (`kill_open` ends them all at once).
_OPEN: dict[int, "Session"] = {}  # by id: a Session (a dataclass) is not hashable
_OPEN_LOCK = threading.Lock()


class SandboxUnavailable(UsageError):
    """bubblewrap is missing or cannot start here; the message says why and what to do."""


class WorkerFailed(DevplaceError):
    """The grader's own worker could not start (before any of a submission's code ran): the
    grader's failure, never a student's zero; the message names the cause and the fix."""


@dataclass
class Limits:
    """What one submission may use. Memory is per process (address space) and, with a cgroup, for
    the whole tree; CPU time is per process; the output is what it prints, stdout and stderr."""

    memory_mb: int = 2048
    processes: int = 64
    file_mb: int = 16
    scratch_mb: int = 64
    output_kb: int = 1024
    open_files: int = 256

    def rlimits(self, cpu_seconds: int) -> dict[str, int]:
        return {"address_space": self.memory_mb * MIB, "cpu_seconds": cpu_seconds, "processes": self.processes,
                "file_size": self.file_mb * MIB, "open_files": self.open_files, "core": 0}


# -- is there a sandbox? -------------------------------------------------------------------------------
_PROBED: dict[str, str | None] = {}


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=None)
def _supports(bwrap: str, option: str) -> bool:
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return option in text


def require_sandbox(unsafe: bool = False) -> str | None:
    """The path of a working ``bwrap``, or ``None`` with ``unsafe``; otherwise `SandboxUnavailable`."""
    bwrap = find_bwrap()
    why = None
    if bwrap is None:
        why = ("bubblewrap (bwrap) is not installed. Grading runs students' code and needs it to keep that code "
               "away from your files and network (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
               "bubblewrap). There is none for macOS or Windows: grade on Linux (a VM or container will do)")
    else:
        if bwrap not in _PROBED:
            _PROBED[bwrap] = _probe(bwrap)
        if _PROBED[bwrap]:
            why = f"bubblewrap cannot start a sandbox here: {_PROBED[bwrap]}"
    if why is None:
        return bwrap
    if unsafe:
        return None
    raise SandboxUnavailable(f"{why}; or pass --unsafe-no-sandbox to grade without one (a submission can then "
                             f"read and change your files)")


def _probe(bwrap: str) -> str | None:
    """Why a minimal sandbox fails to start (``None``: it starts)."""
    cmd = [bwrap, *_namespaces(bwrap), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if r.returncode == 0 else (" ".join(r.stderr.split()) or f"exit status {r.returncode}")


def _namespaces(bwrap: str) -> list[str]:
    out = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:  # unprivileged bwrap makes a user namespace; no further ones inside
        out += ["--unshare-user"] + (["--disable-userns"] if _supports(bwrap, "--disable-userns") else [])
    return out


# -- what goes in -------------------------------------------------------------------------------------
def packages() -> list[Path]:
    """The folders of the ``devplace_lite`` and the ``devplace_course`` this grader runs (in a
    checkout, both at its top): the worker imports these same two, not whichever an
    environment's own install would find."""
    import devplace_lite

    return [Path(devplace_lite.__file__).resolve().parent, Path(__file__).resolve().parents[1]]


def worker_env() -> dict[str, str]:
    """The worker's whole environment (`ENV`, and the folders holding the grader's own packages
    as its ``PYTHONPATH``)."""
    roots = dict.fromkeys(str(p.parent) for p in packages())
    return {**ENV, "PYTHONPATH": os.pathsep.join(roots)}


def python_paths() -> list[Path]:
    """The folders the worker needs: the Python installation, its environment, the packages."""
    raw = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *map(str, packages())}
    paths = {Path(p) for p in raw} | {Path(os.path.realpath(p)) for p in raw}
    paths = {p for p in paths if p.is_dir() and not _is_system(p)}
    return sorted(p for p in paths if not any(q != p and q in p.parents for q in paths))


def closed_to_others(paths: list[Path], parents: bool = True) -> tuple[Path, str] | None:
    """The first of ``paths`` (or, with ``parents``, of the folders above them) that a user other
    than its owner cannot enter, or whose ``__init__.py`` it cannot read, and the ``chmod`` that
    opens it: what an unprivileged worker trips on where it could not keep the right to read
    (`devplace_course.exercises.worker.confine`). In the sandbox the folders above are made
    anew, open to all (``parents=False``)."""
    for p in paths:
        for folder in [*reversed(p.parents), p] if parents else [p]:
            with contextlib.suppress(OSError):
                if not folder.stat().st_mode & 0o001:
                    return folder, "o+x" if folder != p else "-R o+rX"
        with contextlib.suppress(OSError):
            if not (p / "__init__.py").stat().st_mode & 0o004:
                return p, "-R o+rX"
    return None


def _is_system(p: Path) -> bool:
    return p == Path("/usr") or Path("/usr") in p.parents


def stage(paths: list[Path], root: Path) -> tuple[list[str], list[str]]:
    """Copy a submission's files into ``root`` (readable by the sandbox's uid): regular files only,
    links and special files dropped, at most `_STAGE_LIMIT` bytes. Returns the paths inside the
    sandbox, and notes."""
    root.mkdir(mode=0o755)
    inside, notes, total = [], [], 0
    common = paths[0].parent if len(paths) == 1 else Path(os.path.commonpath([p.parent for p in paths]))
    for p in paths:
        rel = p.relative_to(common)
        st = os.lstat(p)
        if not os.path.isfile(p) or os.path.islink(p):
            notes.append(f"{rel}: not a regular file, left out")
            continue
        total += st.st_size
        if total > _STAGE_LIMIT:
            notes.append(f"{rel}: left out, the submission is over {_STAGE_LIMIT // MIB} MB")
            continue
        dest = root / rel
        for parent in reversed(dest.relative_to(root).parents[:-1]):
            (root / parent).mkdir(mode=0o755, exist_ok=True)
        with open(p, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(dest, 0o644)
        inside.append(str(Path("/submission") / rel))
    return inside, notes


def _next_uid() -> int:
    """An unprivileged uid for one session, distinct from other sessions of this and other graders."""
    with _UID_LOCK:
        k = next(_UIDS)
    return 200_000 + (os.getpid() % 50_000) * 64 + k % 64


class RunClock:
    """A clock that runs while a worker runs or sleeps, and not while the machine's load keeps
    it waiting for a CPU.

    `now` is `time.monotonic` less the run-queue wait (``/proc/PID/schedstat``: time runnable
    while other processes held the CPU) that the worker spent with no process of its own beside
    it. A submission that starts processes is timed on the wall clock meanwhile: its own
    processes must not buy it time by crowding out its worker. The worker is the Python process
    among ``root`` and its descendants (the cgroup shell execs bwrap, which forks the namespace's
    init, which starts the worker). An endless loop and a sleep both advance the clock. Before
    the worker starts, or where the kernel keeps no such count, it is the wall clock."""

    def __init__(self, root: int) -> None:
        self.root, self.worker, self.waited, self.excused = root, None, 0.0, 0.0

    def now(self) -> float:
        if self.worker is None:
            self.worker = _find_python(self.root)
            self.waited = _queued(self.worker) if self.worker is not None else 0.0
        if self.worker is not None:
            waited = _queued(self.worker)
            if waited is not None:
                if not _children(self.worker):
                    self.excused += max(waited - self.waited, 0.0)
                self.waited = waited
        return time.monotonic() - self.excused


def _queued(pid: int) -> float | None:
    """Seconds ``pid`` has waited on the run queue (None: ended, or no schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (every thread's)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _find_python(root: int) -> int | None:
    """The first Python process among ``root`` and its descendants (None: none yet, or no /proc)."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("python"):
                    return pid
        except OSError:
            continue
        todo.extend(_children(pid))
    return None


# -- cgroups (as root, where the machine allows) -----------------------------------------------------------
class Cgroup:
    """A cgroup for one session's memory and processes (v1 memory + pids controllers, or v2)."""

    def __init__(self, limits: Limits) -> None:
        self.dirs: list[Path] = []
        self.kind = ""
        self.why_not = ""
        name = f"devplace-grade-{uuid.uuid4().hex[:12]}"
        try:
            if os.geteuid() != 0:
                raise OSError("needs root")
            mine = {}
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(","):
                    mine[c] = path
            v1 = Path("/sys/fs/cgroup/memory/cgroup.procs").exists() and Path("/sys/fs/cgroup/pids/cgroup.procs").exists()
            if v1:
                self._v1(name, mine, limits)
            else:
                self._v2(name, mine.get("", "/"), limits)
        except (OSError, ValueError) as e:
            self.close()
            self.why_not = str(e) or type(e).__name__

    def _v1(self, name: str, mine: dict[str, str], limits: Limits) -> None:
        for controller in ("memory", "pids"):
            d = Path("/sys/fs/cgroup") / controller / mine.get(controller, "/").lstrip("/") / name
            d.mkdir()
            self.dirs.append(d)
        mem, pids = self.dirs
        (mem / "memory.limit_in_bytes").write_text(str(limits.memory_mb * MIB))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            (mem / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_mb * MIB))
        (pids / "pids.max").write_text(str(limits.processes))
        self.kind = "v1"

    def _v2(self, name: str, path: str, limits: Limits) -> None:
        base = Path("/sys/fs/cgroup")
        if not (base / "cgroup.controllers").exists():
            base = base / "unified"
        parent = base / path.lstrip("/")
        if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
            raise OSError("the memory and pids controllers are not delegated here")
        d = parent / name
        d.mkdir()
        self.dirs.append(d)
        (d / "memory.max").write_text(str(limits.memory_mb * MIB))
        if (d / "memory.swap.max").exists():
            (d / "memory.swap.max").write_text("0")
        (d / "pids.max").write_text(str(limits.processes))
        self.kind = "v2"

    @property
    def active(self) -> bool:
        return bool(self.kind)

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started inside the cgroup (a shell writes its pid, then becomes ``cmd``)."""
        if not self.active:
            return cmd
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *cmd]

    def out_of_memory(self) -> bool:
        try:
            if self.kind == "v1":
                text = (self.dirs[0] / "memory.oom_control").read_text()
                return any(ln.startswith("oom_kill ") and int(ln.split()[1]) > 0 for ln in text.splitlines()) \
                    or int((self.dirs[0] / "memory.failcnt").read_text()) > 0
            if self.kind == "v2":
                text = (self.dirs[0] / "memory.events").read_text()
                return any(ln.split()[0] in ("oom_kill", "max") and int(ln.split()[1]) > 0 for ln in text.splitlines())
        except (OSError, ValueError, IndexError):
            pass
        return False

    def hit_process_limit(self) -> bool:
        """Whether a fork failed at the cgroup's process limit."""
        try:
            d = self.dirs[1] if self.kind == "v1" else self.dirs[0]
            return any(ln.split()[0] == "max" and int(ln.split()[1]) > 0
                       for ln in (d / "pids.events").read_text().splitlines())
        except (OSError, ValueError, IndexError):
            return False

    def kill(self) -> None:
        for _ in range(100):
            pids = set()
            for d in self.dirs:
                try:
                    pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
                except OSError:
                    pass
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def close(self) -> None:
        self.kill()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self.dirs = []


# -- one sandboxed worker ------------------------------------------------------------------------------
class Died(Exception):
    """The worker ended (crash, kill, limit); ``why`` says how."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class Session:
    """A worker for one submission, in its sandbox. Use as a context manager: leaving it kills
    every process the submission started."""

    files: list[Path]
    limits: Limits
    cpu_seconds: int
    bwrap: str | None  # None: unsafe, no sandbox
    output_head: bytearray = field(default_factory=bytearray)
    output_tail: bytearray = field(default_factory=bytearray)
    output_bytes: int = 0
    over_output: bool = False

    def __enter__(self) -> "Session":
        self._tmp = tempfile.TemporaryDirectory(prefix="devplace-grade-")
        tmp = Path(self._tmp.name)
        os.chmod(tmp, 0o711)  # the worker's own uid passes through to the staged copy (unsafe mode reads it here)
        self.inside, self.stage_notes = stage(self.files, tmp / "submission")
        if self.bwrap is None:  # unsafe: the staged copy is read where it is
            self.inside = [str(tmp / "submission" / Path(p).relative_to("/submission")) for p in self.inside]
        self.cgroup = Cgroup(self.limits) if self.bwrap is not None else None
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        self.uid = uid = _next_uid() if os.geteuid() == 0 else None
        worker = [sys.executable, "-B", "-s", *(["-P"] if sys.version_info >= (3, 11) else []),
                  "-m", "devplace_course.exercises.worker", "--fds", f"{req_r},{rep_w}",
                  "--limits", json.dumps(self.limits.rlimits(self.cpu_seconds))] + \
                 (["--uid", str(uid)] if uid is not None else []) + \
                 (["--keep-reading"] if uid is not None and self.bwrap is None else [])
        if self.bwrap is not None:
            cmd = self.cgroup.wrap(self._bwrap_command(tmp / "submission") + worker)
            env, cwd = {"PATH": ENV["PATH"]}, "/"
        else:
            scratch = tmp / "scratch"
            scratch.mkdir(mode=0o1777)
            os.chmod(scratch, 0o1777)
            env = {**worker_env(), "HOME": str(scratch), "TMPDIR": str(scratch), "MPLCONFIGDIR": str(scratch / ".mpl"),
                   "NUMBA_CACHE_DIR": str(scratch / ".numba")}
            cmd, cwd = worker, str(scratch)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, env=env, cwd=cwd,
                                     pass_fds=(req_r, rep_w), start_new_session=True)
        self._clock = RunClock(self.proc.pid)
        with _OPEN_LOCK:
            _OPEN[id(self)] = self
        for fd in (req_r, rep_w, out_w):
            os.close(fd)
        self._requests = os.fdopen(self._req_w, "wb")
        self._events: queue.Queue = queue.Queue()
        self._readers = [threading.Thread(target=self._read_replies, daemon=True),
                         threading.Thread(target=self._read_output, args=(out_r,), daemon=True)]
        for t in self._readers:
            t.start()
        return self

    def _bwrap_command(self, staged: Path) -> list[str]:
        cmd = [self.bwrap, *_namespaces(self.bwrap), "--hostname", "devplace-grade", "--clearenv"]
        for key, value in worker_env().items():
            cmd += ["--setenv", key, value]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(d):
                cmd += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                cmd += ["--ro-bind", d, d]
        cmd += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        # the private /tmp first: an environment or checkout under /tmp is then bound over it, not hidden by it
        cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(self.limits.scratch_mb * MIB),
                "--tmpfs", "/tmp"]
        made: set[Path] = set()
        for p in python_paths():
            for parent in reversed(p.parents[:-1]):  # bwrap would make them 0700: the sandbox's uid must pass
                if parent not in made:
                    made.add(parent)
                    cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", str(p), str(p)]
        cmd += ["--ro-bind", str(staged), "/submission", "--chdir", "/tmp", "--"]
        return cmd

    # -- the channel --
    def _read_replies(self) -> None:
        from .answers import MAX_BYTES

        with os.fdopen(self._rep_r, "rb") as replies:
            while True:
                line = replies.readline(MAX_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_BYTES or not line.endswith(b"\n"):
                    self._events.put({"event": "garbled", "why": f"a reply of more than {MAX_BYTES} bytes"})
                    break
                try:
                    event = json.loads(line)
                except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
                    event = {"event": "garbled", "why": "a reply that is not JSON"}
                self._events.put(event if isinstance(event, dict) else {"event": "garbled", "why": "not an object"})
        self._events.put(None)

    def _read_output(self, fd: int) -> None:
        limit, keep = self.limits.output_kb * 1024, 4096
        with os.fdopen(fd, "rb") as out:
            while True:
                chunk = out.read1(65536)
                if not chunk:
                    return
                self.output_bytes += len(chunk)
                if len(self.output_head) < keep:
                    self.output_head += chunk[: keep - len(self.output_head)]
                self.output_tail = (self.output_tail + chunk)[-keep:]
                if self.output_bytes > limit and not self.over_output:
                    self.over_output = True
                    self.kill()

    def deadline(self, seconds: float) -> tuple[float, float]:
        """``seconds`` from now on the submission's clock (`RunClock`), and at most `WALL_FACTOR`
        times that of wall time whatever the load."""
        return self._clock.now() + seconds, time.monotonic() + WALL_FACTOR * seconds

    def send(self, request: dict[str, Any]) -> None:
        try:
            write_frame(self._requests, request)
        except (BrokenPipeError, OSError, ValueError):
            raise Died(self.why_dead()) from None

    def next_event(self, deadline: tuple[float, float]) -> dict[str, Any] | None:
        """The worker's next reply, ``None`` at the `deadline`; `Died` when it has ended."""
        while True:
            left = min(deadline[0] - self._clock.now(), deadline[1] - time.monotonic())
            if left <= 0:
                return None
            try:
                event = self._events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if event is None:
                self._events.put(None)
                raise Died(self.why_dead())
            if event.get("event") == "garbled":
                self._events.put(None)
                self.kill()
                raise Died(f"crashed: sent {event['why']}")
            return event

    def output(self) -> str:
        """What the submission printed: the start, and the end when there was more."""
        head = self.output_head.decode("utf-8", "replace")
        if self.output_bytes <= len(self.output_head):
            return head
        return f"{head} [... {self.output_bytes} bytes in all ...] {self.output_tail.decode('utf-8', 'replace')}"

    def why_dead(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        if self.over_output:
            return f"output: printed more than {self.limits.output_kb} KB, stopped"
        if self.cgroup is not None and self.cgroup.out_of_memory():
            return f"memory: went over {self.limits.memory_mb} MB, stopped"
        if code < 0:
            return f"crashed: killed by signal {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
        if code > 128 and code - 128 in signal.valid_signals():  # bwrap reports its child's signal so
            name = signal.Signals(code - 128).name
            return f"memory: went over {self.limits.memory_mb} MB, stopped" if name == "SIGKILL" and \
                self.cgroup is not None and self.cgroup.out_of_memory() else f"crashed: killed by signal {name}"
        return f"crashed: exited with status {code}"

    def kill(self) -> None:
        """End every process of the session: the sandbox's PID namespace with bwrap, the cgroup's
        processes, and (without a sandbox) the process group."""
        proc = getattr(self, "proc", None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.kill()
        except OSError:
            pass
        if self.cgroup is not None:
            self.cgroup.kill()

    def __exit__(self, *exc: Any) -> None:
        with _OPEN_LOCK:
            _OPEN.pop(id(self), None)
        try:
            self.send({"op": "quit"})
            self.proc.wait(timeout=2)  # a worker that quits ends its sandbox (and everything left in it)
        except (Died, subprocess.TimeoutExpired):
            pass
        self.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            self._requests.close()
        except OSError:
            pass
        for t in self._readers:
            t.join(timeout=10)
        if self.cgroup is not None:
            self.cgroup.close()
        self._tmp.cleanup()


def worker_failed(session: Session, died: Died) -> WorkerFailed:
    """The one-line error for a worker that ended before it was ready (`Session` ``uid`` is the
    uid it ran as): what it printed last, and the folder it could not read with the fix."""
    lines = [ln.strip() for ln in session.output().splitlines() if ln.strip()]
    said = f": {lines[-1][:300]}" if lines else ""
    who = f" as uid {session.uid}" if session.uid is not None else ""
    needed = [*packages(), *python_paths()]  # the packages first: the likeliest to be private
    closed = closed_to_others(needed, parents=session.bwrap is None) if session.uid is not None else None
    fix = ""
    if closed:
        folder, mode = closed
        fix = (f"; {folder} is closed to other users: chmod {mode} {shlex.quote(str(folder))}, or keep the checkout "
               "and its environment in a folder others can enter")
    return WorkerFailed(f"grading stopped before any grade: the grader's worker could not start{who} "
                        f"({died.why}){said}{fix}")


def kill_open() -> None:
    """End the worker of every open session of this process now (the grader was told to stop:
    SIGTERM or Ctrl-C), so that none runs on to the end of its exercise's budget."""
    with _OPEN_LOCK:
        sessions = list(_OPEN.values())
    for session in sessions:
        session.kill()


def describe(bwrap: str | None, limits: Limits) -> str:
    """One line on how submissions are contained, for the report."""
    if bwrap is None:
        return ("NO SANDBOX (--unsafe-no-sandbox): submissions ran as plain child processes and could read and "
                "change the grader's files")
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        version = "bubblewrap"
    probe = Cgroup(limits)
    cg = f"cgroup {probe.kind} for memory and processes of the whole tree" if probe.active else \
        f"no cgroup ({probe.why_not}): memory is limited per process only"
    probe.close()
    return (f"sandbox: {version}, no network, only the library, the course and the one submission visible; limits: "
            f"{limits.memory_mb} MB memory, {limits.processes} processes, {limits.file_mb} MB per file, "
            f"{limits.scratch_mb} MB scratch, {limits.output_kb} KB output; {cg}")
