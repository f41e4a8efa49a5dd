"""Building the book: executed notebooks, the HTML book, the PDF, and a headless Chromium to look
at them.

One path serves ``make notebooks``, ``make book``, ``make pdf`` and the rendered-book test:

1. :func:`execute_all` runs each chapter (a MyST notebook) top to bottom in a fresh kernel, two
   at a time, and writes the executed ``.ipynb`` (FAST mode or full size);
2. :func:`stage` puts those notebooks beside the book's other pages and a copy of
   ``_config.yml`` with execution off, the repository (for the launch links) filled in when
   :func:`repo_url` finds a GitHub or GitLab address (else the links are left out, with one
   note: a clone of a local path, another host, an archive without git);
3. :func:`build` runs ``jupyter-book build`` on the staged folder (``html`` or ``singlehtml``);
4. :func:`print_pdf` prints the single-page HTML book to one PDF with Chromium, after MathJax
   (a local copy, ``sphinx-mathjax-offline``) has typeset every formula, and reports what is
   wider than the page (:data:`OVERFLOW`, measured with print styles at the page's width).

Two editions: the instructor's (solutions folded under each exercise, rubrics) and the
student's (``--edition student``: `devplace_course.student` takes solutions and rubrics out).

Every executed notebook (the published ones are what Colab and Binder open) gets an install
cell in front of its first code cell (folded, tagged ``hide-cell``; the source chapters have
none): :func:`stamp_install` puts it there, installing the project's repository, from
``DEVPLACE_REPO_URL`` (the publishing workflow sets it) or the checkout's ``origin`` remote.

Usage::

    python -m devplace_course.book notebooks [--fast] [--student] [--edition E]   # build/executed/
    python -m devplace_course.book html [--fast] [--edition E]    # build/book[-student]/_build/html
    python -m devplace_course.book pdf [--fast] [--edition E]     # build/devplace_lite[-student].pdf

Needs the ``book`` extra (jupyter-book, jupytext, nbclient) and, for the PDF, Chromium
(:func:`ensure_chromium`: Debian's package installed when running as root, else one line
naming it).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .checkout import checkout
from .notebook import DEFAULT_TARGET, with_install_cell

ROOT = checkout()  # the book is built from a clone of the project, wherever the package is installed
CHAPTERS = ROOT / "chapters"
BUILD = ROOT / "build"
EXECUTED = BUILD / "executed"
PDF = BUILD / "devplace_lite.pdf"
#: The student edition's chapters (devplace_course.student), executed into EXECUTED/<mode>/student.
STUDENT_SRC = BUILD / "student"
#: Files of the chapters folder that the staged book needs besides the notebooks.
PAGES_COPIED = ("_toc.yml", "*.bib", "_static")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


# -- the chapters -------------------------------------------------------------------------------
def toc_files(chapters: Path = CHAPTERS) -> list[str]:
    """Every file of ``_toc.yml``, in reading order (the root first)."""
    import yaml

    toc = yaml.safe_load((chapters / "_toc.yml").read_text())
    out = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                out.append(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return out


def is_notebook(path: Path) -> bool:
    """A MyST page with a jupytext header (a chapter), not a plain page."""
    text = path.read_text(encoding="utf-8")
    return text.startswith("---") and "jupytext:" in text.split("\n---", 1)[0]


def notebook_pages(chapters: Path = CHAPTERS) -> list[str]:
    return [f for f in toc_files(chapters) if (chapters / f"{f}.md").exists() and is_notebook(chapters / f"{f}.md")]


#: Hosts whose launch links sphinx_book_theme can build: Colab opens GitHub only, Binder both.
LAUNCH_HOSTS = {"github.com": ("colab_url", "binderhub_url"), "gitlab.com": ("binderhub_url",)}
#: The launch-link settings of ``_config.yml`` (kept only where a host above is known).
LAUNCH_KEYS = ("colab_url", "binderhub_url")


def _configured_url(root: Path) -> str | None:
    """``repository.url`` of the book's ``_config.yml`` (unset in the project: a fork sets its own)."""
    import yaml

    cfg = root / "chapters" / "_config.yml"
    if not cfg.exists():
        return None
    return ((yaml.safe_load(cfg.read_text()) or {}).get("repository") or {}).get("url")


def repo_url(root: Path = ROOT) -> str | None:
    """The project's repository as a web address (``https://HOST/ORG/REPO``), or None.

    From ``DEVPLACE_REPO_URL`` (the publishing workflow sets it), else ``repository.url`` of
    ``chapters/_config.yml``, else the checkout's ``origin`` remote. A local path, a ``file://``
    URL, a checkout without git or without ``origin`` give None: the book names no repository
    (and never a path of the machine that built it)."""
    url = os.environ.get("DEVPLACE_REPO_URL") or _configured_url(root)
    if not url and shutil.which("git") and (root / ".git").exists():
        r = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True)
        url = r.stdout.strip() if r.returncode == 0 else None
    if not url:
        return None
    m = re.match(r"^(?:ssh://)?[\w.-]+@([^:/]+)[:/](.+)$", url)  # git@github.com:org/repo.git -> https://github.com/org/repo
    if m:
        url = f"https://{m.group(1)}/{m.group(2)}"
    url = re.sub(r"\.git$", "", url.strip().rstrip("/"))
    return url if re.match(r"^https?://[^/\s]+/[^/\s]+/[^\s]+$", url) else None


def launch_note(url: str | None) -> str | None:
    """Why the book has no launch links (Colab, Binder) for ``url``, in one line; None when it has."""
    host = re.sub(r"^https?://", "", url).split("/")[0].lower() if url else None
    if host in LAUNCH_HOSTS:
        return None
    why = f"{url} is not on GitHub or GitLab" if url else "no repository address (no git origin with a web address)"
    return (f"launch links (Colab, Binder) left out: {why}; set DEVPLACE_REPO_URL=https://github.com/ORG/REPO "
            f"(or repository.url in chapters/_config.yml) to add them")


def install_target(url: str | None, ref: str | None = None) -> str:
    """What the install cell passes to pip: the repository at ``ref`` (a tag or branch) when one
    is known, else the package index's ``devplace_lite``."""
    if not url:
        return DEFAULT_TARGET
    git = url if url.startswith("git+") else f"git+{url}"
    return f"devplace_lite[torch] @ {git}" + (f"@{ref}" if ref else "")


def stamp_install(nb, target: str):
    """Put the install cell of ``target`` in front of the notebook's first code cell (once:
    stamping again rewrites it); returns the cell."""
    return with_install_cell(nb, target)


def kernel_config():
    """The kernel manager's settings: CurveZMQ keys for the kernel's sockets where pyzmq has
    CurveZMQ and the kernelspec declares it (ipykernel's does), so the kernel talks over
    encrypted TCP and does not print its warning about plain text once per chapter."""
    import zmq
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"}})


def execute(md: Path, out: Path, env: dict, cwd: Path, target: str | None = None, timeout: int = 1800) -> str | None:
    """Execute one chapter into ``out``, with the install cell of ``target`` (default: the
    package index's release) in front; the error text, or None when every cell ran."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.read(md)
    stamp_install(nb, target or DEFAULT_TARGET)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}},
                            config=kernel_config())
    error = None
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        error = str(e)[-3000:]
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return error


def kernel_env(fast: bool) -> dict:
    """The chapters' kernels: FAST or full, and the inline backend (MPLBACKEND=Agg would drop every figure)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DEVPLACE_FAST")}
    if fast:
        env["DEVPLACE_FAST"] = "1"
    return env


def execute_all(out_dir: Path, fast: bool, chapters: Path = CHAPTERS, jobs: int = 2,
                target: str | None = None) -> tuple[dict[str, str | None], dict[str, float]]:
    """Execute every chapter of ``chapters`` into ``out_dir/NAME.ipynb``, ``jobs`` at a time.
    Returns (error or None per chapter, seconds per chapter)."""
    env = kernel_env(fast)
    seconds: dict[str, float] = {}

    def run(name: str):
        t = time.perf_counter()
        err = execute(chapters / f"{name}.md", out_dir / f"{name}.ipynb", env, chapters, target)
        seconds[name] = time.perf_counter() - t
        print(f"{name}: {'failed' if err else 'ran'} in {seconds[name]:.0f} s", flush=True)
        return name, err

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        errors = dict(pool.map(run, notebook_pages(chapters)))
    return errors, seconds


def stage(notebooks: Path, dest: Path, chapters: Path = CHAPTERS, url: str | None = None,
          edition: str = "instructor") -> Path:
    """A source folder for jupyter-book: the executed notebooks, the other pages, and the config
    with execution off and the repository of the launch links filled in (only a GitHub or GitLab
    address: the theme can build links for no other). The student edition says so in its title."""
    import yaml

    dest.mkdir(parents=True, exist_ok=True)
    for name in toc_files(chapters):
        nb = notebooks / f"{name}.ipynb"
        if nb.exists():
            shutil.copy2(nb, dest / nb.name)
        elif (chapters / f"{name}.md").exists():
            shutil.copy2(chapters / f"{name}.md", dest / f"{name}.md")
    for pattern in PAGES_COPIED:
        for p in chapters.glob(pattern):
            if p.is_dir():
                shutil.copytree(p, dest / p.name, dirs_exist_ok=True)
            else:
                shutil.copy2(p, dest / p.name)
    config = yaml.safe_load((chapters / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"  # executed already
    if edition == "student":
        config["title"] = f"{config.get('title', '')} (student edition)".strip()
    host = re.sub(r"^https?://", "", url).split("/")[0].lower() if url else None
    if host in LAUNCH_HOSTS:
        config.setdefault("repository", {})["url"] = url
        buttons = config.setdefault("launch_buttons", {})
        for key in set(LAUNCH_KEYS) - set(LAUNCH_HOSTS[host]):
            buttons.pop(key, None)  # the theme warns (fails the build) on a link it cannot make
    else:  # no address the theme can parse: no launch links rather than a failed build or links to nowhere
        config.pop("repository", None)
        config.pop("launch_buttons", None)
    (dest / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def build(source: Path, out: Path, builder: str = "html", timeout: int = 1800) -> subprocess.CompletedProcess:
    """``jupyter-book build`` of a staged folder (warnings kept in the returned log)."""
    jb = Path(sys.executable).with_name("jupyter-book")
    jb = str(jb) if jb.exists() else shutil.which("jupyter-book")
    if jb is None:
        raise RuntimeError("jupyter-book is not installed (the book extra)")
    return subprocess.run([jb, "build", str(source), "--path-output", str(out), "--builder", builder, "--keep-going"],
                          capture_output=True, text=True, timeout=timeout, env=kernel_env(True))


# -- Chromium, driven over the DevTools pipe ----------------------------------------------------
def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ChromiumMissing(RuntimeError):
    """No Chromium, and none could be installed; the message (one line) names the package."""


def ensure_chromium(install: bool = True) -> str:
    """Path of a Chromium binary. Where none is on the PATH and this runs as root with apt-get,
    Debian's ``chromium`` package is installed (as the rendered-book test does); otherwise
    :class:`ChromiumMissing` says which package to install."""
    found = find_chromium()
    if found:
        return found
    how = "install the chromium package (Debian/Ubuntu: sudo apt-get install chromium)"
    if not install or not shutil.which("apt-get") or os.geteuid() != 0:
        raise ChromiumMissing(f"Chromium is needed and not installed: {how}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = ""
    for step in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "chromium"]):
        r = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
        log = " ".join((r.stdout + r.stderr)[-300:].split())
        if step[1] == "install" and r.returncode == 0:
            break
    found = find_chromium()
    if not found:
        raise ChromiumMissing(f"Chromium is needed and apt-get could not install it ({log}): {how}")
    return found


class Browser:
    """A headless Chromium and a minimal DevTools-protocol client over ``--remote-debugging-pipe``
    (fd 3: commands to the browser, fd 4: replies and events, each a JSON text ending in NUL).
    No Python package needed; every page is opened with the Network domain on, so the requests a
    page makes can be read back (:meth:`inspect` returns them)."""

    def __init__(self, binary: str, profile: Path, extra_flags: tuple[str, ...] = ()) -> None:
        import fcntl

        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        # move the browser's ends above 9 so that dup2 onto 3 and 4 never aliases them
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(out_w)

        def wire():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.profile = profile
        self._log = open(profile / "chromium.log", "wb")
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, *extra_flags, f"--user-data-dir={profile}",
                                      "--remote-debugging-pipe", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=wire, close_fds=False, start_new_session=True)
        os.close(hi_r)
        os.close(hi_w)
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Condition()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                with self._lock:
                    self._lock.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        self._replies[msg["id"]] = msg
                        self._lock.notify_all()
                else:
                    self._events.put(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._next not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"chromium did not answer {method} (exit status {self.proc.poll()})")
                self._lock.wait(min(left, 1.0))
            reply = self._replies.pop(self._next)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def _wait_load(self, session: str, timeout: float, requests: list[str]) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the page did not load within {timeout} s")
            try:
                ev = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if ev.get("sessionId") != session:
                continue
            if ev.get("method") == "Network.requestWillBeSent":
                requests.append(ev["params"]["request"]["url"])
            if ev.get("method") == "Page.loadEventFired":
                return

    def _drain(self, session: str, requests: list[str]) -> None:
        while True:
            try:
                ev = self._events.get_nowait()
            except queue.Empty:
                return
            if ev.get("sessionId") == session and ev.get("method") == "Network.requestWillBeSent":
                requests.append(ev["params"]["request"]["url"])

    def open(self, url: str, width: int = 1280, height: int = 900, timeout: float = 60) -> tuple[str, str, list[str]]:
        """Open ``url`` in a fresh tab of the given size; (target, session, requests so far)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        self.send("Network.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        requests: list[str] = []
        self.send("Page.navigate", {"url": url}, session=session)
        self._wait_load(session, timeout, requests)
        return target, session, requests

    def evaluate(self, session: str, script: str, timeout: float = 60):
        res = self.send("Runtime.evaluate", {"expression": script, "awaitPromise": True, "returnByValue": True},
                        session=session, timeout=timeout)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def inspect(self, url: str, script: str, timeout: float = 60, screenshot: Path | None = None,
                width: int = 1280) -> dict:
        """Open ``url`` in a window ``width`` px wide, wait for its load event, return the JSON that
        ``script`` (an expression evaluating to a Promise of a JSON string) produces, with
        ``requests``: every URL the page asked for. With ``screenshot``, the page (up to 4000 px
        of it) is saved there as PNG."""
        target, session, requests = self.open(url, width=width, timeout=timeout)
        try:
            out = json.loads(self.evaluate(session, script, timeout))
            if screenshot is not None:
                self.screenshot(session, screenshot, width=width)
            self._drain(session, requests)
            out["requests"] = requests
            return out
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def screenshot(self, session: str, path: Path, max_height: int = 4000, width: int = 1280) -> None:
        import base64

        height = int(self.evaluate(session, "document.documentElement.scrollHeight"))
        clip = {"x": 0, "y": 0, "width": width, "height": min(height, max_height), "scale": 1}
        data = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True},
                         session=session, timeout=120)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except RuntimeError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        os.close(self._cmd_w)
        self._log.close()


#: Resolves when MathJax has typeset the page (at once when the page has no math).
MATH_READY = """
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  if (window.MathJax && MathJax.typesetPromise) { await MathJax.typesetPromise(); }
  if (window.devplaceFit) { devplaceFit(); }   // the book's tables, fitted to the column once typeset
  return JSON.stringify({math: document.querySelectorAll('mjx-container').length});
})()
"""


#: What is wider than its column: every table, formula, code block and output box that shows
#: (folded and hidden ones have no box) and is wider than its own box (scrollWidth > clientWidth:
#: it scrolls, or spills) or reaches past the text column. A JSON list of one-line descriptions.
OVERFLOW = r"""
(() => {
  const main = document.querySelector('main') || document.body;
  const article = main.querySelector('article') || main;   // the text, not the sidebars
  const col = article.getBoundingClientRect();
  const right = Math.min(col.right, document.documentElement.clientWidth);
  const sel = 'table, mjx-container[display="true"], mjx-container, div.math, pre, div.highlight, ' +
              'div.cell_output, div.output, .text_html, .text_markdown, img, dl, blockquote';
  const out = [];
  // innermost first: a table that spills is named, not every box around it
  for (const e of Array.from(article.querySelectorAll(sel)).reverse()) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    // an inline formula's glyphs overhang its box by a pixel or two: only its right edge counts
    const inline = getComputedStyle(e).display.startsWith('inline') ||
                   (e.tagName === 'MJX-CONTAINER' && e.getAttribute('display') !== 'true');
    const spill = !inline && e.scrollWidth > e.clientWidth + 2 && e.clientWidth > 0;
    const past = r.right > right + 2;
    if (!spill && !past) continue;
    if (Array.from(e.querySelectorAll(sel)).some(c => out.some(o => o.el === c))) continue;
    const what = e.tagName.toLowerCase() + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : '');
    const page = (e.closest('section[id]') || {}).id || '';
    const width = Math.max(e.scrollWidth, Math.round(r.right - col.left));
    out.push({el: e, text: `${what} in #${page}: ${width} px in ${Math.round(right - col.left)} px: ` +
                           (e.textContent || e.getAttribute('src') || '').replace(/\s+/g, ' ').trim().slice(0, 70)});
  }
  return JSON.stringify(out.reverse().map(o => o.text));
})()
"""

#: The code lines a reader sees that their box wraps: every line of a cell's code (``pre`` in
#: ``div.cell_input``) longer than the characters its box holds (its width over the width of
#: one character in its font). A box that scrolls instead (``white-space: pre``) is
#: `OVERFLOW`'s. A JSON list of one-line descriptions.
WRAPPED = r"""
(() => {
  const out = [];
  for (const pre of document.querySelectorAll('div.cell_input pre')) {
    const cs = getComputedStyle(pre);
    if (!pre.getBoundingClientRect().width || cs.whiteSpace === 'pre') continue;
    const probe = document.createElement('span');
    probe.style.whiteSpace = 'pre';
    probe.textContent = 'x'.repeat(100);
    pre.appendChild(probe);
    const char = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const fits = Math.floor((pre.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)) / char);
    const page = (pre.closest('section[id]') || {}).id || '';
    for (const line of pre.textContent.split('\n').filter(l => l.length > fits))
      out.push(`#${page}: ${line.length} characters in ${fits}: ${line.trim().slice(0, 50)}`);
  }
  return JSON.stringify(out);
})()
"""

#: The printable width of the PDF's pages (A4, half-inch margins) in CSS pixels.
PAGE = {"paperWidth": 8.27, "paperHeight": 11.69, "marginTop": 0.6, "marginBottom": 0.6, "marginLeft": 0.5,
        "marginRight": 0.5}
PRINT_WIDTH_PX = round((PAGE["paperWidth"] - PAGE["marginLeft"] - PAGE["marginRight"]) * 96)


def print_pdf(html: Path, pdf: Path, binary: str | None = None, timeout: float = 600) -> dict:
    """Print ``html`` (the single-page book) to ``pdf`` with headless Chromium, once every image
    has loaded and MathJax has typeset every formula. Returns what it saw: ``math`` (typeset
    formulas), ``images``, ``broken`` (images that did not load), ``titles`` (the h1 and h2
    headings: in the single-page book a chapter's title is an h2), ``overflow`` (what is wider
    than the page) and ``wrapped`` (code lines their box wraps, `WRAPPED`), both measured with
    print styles at the page's printable width."""
    import base64

    binary = binary or ensure_chromium()
    profile = Path(tempfile.mkdtemp(prefix="devplace-pdf-"))
    browser = Browser(binary, profile)
    try:
        target, session, _ = browser.open(html.resolve().as_uri(), timeout=timeout)
        browser.evaluate(session, "Promise.all(Array.from(document.images).map(i => { i.loading = 'eager'; "
                                  "return i.complete ? 1 : new Promise(r => { i.onload = i.onerror = r; }); }))"
                                  ".then(() => 1)", timeout)
        seen = json.loads(browser.evaluate(session, MATH_READY, timeout))
        seen.update(json.loads(browser.evaluate(session, "JSON.stringify({images: document.images.length, "
                                                "broken: Array.from(document.images).filter(i => !i.naturalWidth)"
                                                ".map(i => i.src), titles: Array.from(document.querySelectorAll('main h1, main h2'))"
                                                ".map(h => h.textContent.replace('#', '').trim())})", timeout)))
        # lay the page out as the printer will (print styles, the page's width) and measure
        browser.send("Emulation.setEmulatedMedia", {"media": "print"}, session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": PRINT_WIDTH_PX, "height": 1100,
                                                            "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.evaluate(session, "window.devplaceFit ? (devplaceFit(), 1) : 0", timeout)
        seen["overflow"] = json.loads(browser.evaluate(session, OVERFLOW, timeout))
        seen["wrapped"] = json.loads(browser.evaluate(session, WRAPPED, timeout))
        data = browser.send("Page.printToPDF", {"printBackground": True, "preferCSSPageSize": False, **PAGE,
                                                "displayHeaderFooter": True,
                                                "headerTemplate": "<span></span>",
                                                "footerTemplate": "<div style='font-size:8px;width:100%;"
                                                                  "text-align:center'><span class='pageNumber'>"
                                                                  "</span></div>"},
                            session=session, timeout=timeout)["data"]
        pdf.parent.mkdir(parents=True, exist_ok=True)
        tmp = pdf.with_suffix(".tmp")
        tmp.write_bytes(base64.b64decode(data))
        os.replace(tmp, pdf)
        browser.send("Target.closeTarget", {"targetId": target})
        return seen
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)


# -- the command line ---------------------------------------------------------------------------
EDITIONS = ("instructor", "student")


def _executed(fast: bool, edition: str) -> Path:
    out = EXECUTED / ("fast" if fast else "full")
    return out / "student" if edition == "student" else out


def _notebooks(fast: bool, editions: tuple[str, ...]) -> int:
    target = install_target(repo_url(), os.environ.get("DEVPLACE_REPO_REF"))
    errors: dict[str, str | None] = {}
    for edition in editions:
        out = _executed(fast, edition)
        if edition == "student":
            from .student import make_student

            make_student(CHAPTERS, STUDENT_SRC)
            s_errors, _ = execute_all(out, fast, chapters=STUDENT_SRC / "chapters", target=target)
            errors.update({f"student/{k}": v for k, v in s_errors.items()})
        else:
            errors.update(execute_all(out, fast, target=target)[0])
    failed = {k: v for k, v in errors.items() if v}
    for name, err in failed.items():
        print(f"{name} failed:\n{err}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"executed notebooks in {', '.join(str(_executed(fast, e)) for e in editions)}")
    return 0


def _html(fast: bool, builder: str, edition: str = "instructor") -> tuple[int, Path]:
    """Stage and build one edition; returns (exit status, output folder). Prints the build's
    warnings, or the error, never a success line for a failed build."""
    notebooks = _executed(fast, edition)
    chapters = STUDENT_SRC / "chapters" if edition == "student" else CHAPTERS
    if edition == "student" and not chapters.is_dir():
        print("the student edition is not written yet (make student-book)", file=sys.stderr)
        return 2, notebooks
    missing = [n for n in notebook_pages(chapters) if not (notebooks / f"{n}.ipynb").exists()]
    if missing:
        how = "make student-book" if edition == "student" else "make notebooks"
        print(f"not executed yet: {', '.join(missing)} ({how})", file=sys.stderr)
        return 2, notebooks
    suffix = ("" if builder == "html" else f"-{builder}") + ("-student" if edition == "student" else "")
    src = BUILD / f"book-src{suffix}"
    shutil.rmtree(src, ignore_errors=True)
    url = repo_url()
    stage(notebooks, src, chapters=chapters, url=url, edition=edition)
    out = BUILD / f"book{suffix}"
    r = build(src, out, builder)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        print(log[-3000:], file=sys.stderr)
        print(f"{builder}: jupyter-book build failed (exit status {r.returncode})", file=sys.stderr)
        return r.returncode, out
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln]
    if warnings:
        print("\n".join(warnings[:40]), file=sys.stderr)
        print(f"{builder}: {len(warnings)} warning(s): the build counts as failed", file=sys.stderr)
        return 1, out
    note = launch_note(url)
    if note:
        print(note)
    return 0, out


def _pdf(fast: bool, edition: str) -> int:
    try:
        binary = ensure_chromium()
    except ChromiumMissing as e:
        print(f"make pdf: {e}", file=sys.stderr)
        return 2
    rc, out = _html(fast, "singlehtml", edition)
    if rc != 0:
        return rc
    pdf = PDF.with_name(PDF.stem + "-student.pdf") if edition == "student" else PDF
    seen = print_pdf(out / "_build" / "singlehtml" / f"{toc_files()[0]}.html", pdf, binary)
    bad = 0
    if seen["broken"]:
        print(f"figures that did not load: {seen['broken'][:5]}", file=sys.stderr)
        bad = 1
    if seen["overflow"]:
        print(f"wider than the page: {'; '.join(seen['overflow'][:5])}", file=sys.stderr)
        bad = 1
    if seen["wrapped"]:
        print(f"code lines the page wraps: {'; '.join(seen['wrapped'][:5])}", file=sys.stderr)
        bad = 1
    if bad:
        print(f"{pdf} written, with the faults above", file=sys.stderr)
        return 1
    print(f"{pdf} written: {len(seen['titles'])} headings, {seen['images']} figures, "
          f"{seen['math']} formulas typeset, nothing wider than the page, no code line wrapped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the book's notebooks, HTML and PDF.")
    ap.add_argument("what", choices=("notebooks", "html", "pdf"))
    ap.add_argument("--fast", action="store_true", help="FAST mode (DEVPLACE_FAST=1), as the tests")
    ap.add_argument("--edition", choices=EDITIONS, default="instructor",
                    help="instructor (solutions folded, rubrics) or student (no solutions, no rubrics)")
    ap.add_argument("--student", action="store_true", help="notebooks: both editions")
    args = ap.parse_args(argv)
    if args.what == "notebooks":
        return _notebooks(args.fast, EDITIONS if args.student else (args.edition,))
    if args.what == "html":
        rc, out = _html(args.fast, "html", args.edition)
        if rc == 0:
            print(f"open {out / '_build' / 'html' / 'index.html'}")
        return rc
    return _pdf(args.fast, args.edition)


if __name__ == "__main__":
    sys.exit(main())
