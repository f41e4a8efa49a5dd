"""The rendered book: every page of the table of contents, built in FAST mode, opened in headless
Chromium.

The book is built once per session. Its chapters are executed two at a time (nbclient, FAST
mode, the inline matplotlib backend), then `jupyter-book build` renders the executed notebooks
with execution off: the same pages as ``make book``, in about half the time. Each chapter page
must show every figure its notebook produced (img elements with a non-zero natural size) and no
error output; the reference pages must carry what they promise (glossary, bibliography, index).

Chromium is Debian's ``chromium`` package, installed here when missing and running as root;
the test skips, saying why, only where it cannot be installed. It is driven through the
DevTools protocol over a pipe (``--remote-debugging-pipe``): no extra Python package.
"""

from __future__ import annotations

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

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with jupyter-book (the book extra)")

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
PAGES_COPIED = ("_toc.yml", "*.bib")
HIDDEN = {"remove-cell", "remove-output"}
#: myst-nb renders an error output as div.output.traceback (and stderr as div.output.stderr)
ERROR_SELECTOR = ".output.traceback, .output.error, div.traceback"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


def toc_files() -> list[str]:
    """Every file of chapters/_toc.yml, in reading order (the root first)."""
    toc = yaml.safe_load((CHAPTERS / "_toc.yml").read_text())
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


def _is_notebook(name: str) -> bool:
    text = (CHAPTERS / f"{name}.md").read_text(encoding="utf-8")
    return text.startswith("---") and "jupytext:" in text.split("\n---", 1)[0]


NOTEBOOK_PAGES = [f for f in toc_files() if (CHAPTERS / f"{f}.md").exists() and _is_notebook(f)]


# -- Chromium, driven over the DevTools pipe --------------------------------------------------
def _find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium() -> str:
    """Path of a Chromium binary, installing Debian's package when missing (root only)."""
    found = _find_chromium()
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and there is no apt-get to install it with")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it needs root (apt-get install -y chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = ""
    for step in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "chromium"]):
        if step[1] == "update" and _find_chromium():
            break
        r = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
        log = (r.stdout + r.stderr)[-400:]
        if step[1] == "install" and r.returncode == 0:
            break
    found = _find_chromium()
    if not found:
        pytest.skip(f"chromium could not be installed with apt-get: {' '.join(log.split())}")
    return found


class Browser:
    """A headless Chromium and a minimal DevTools-protocol client over ``--remote-debugging-pipe``
    (fd 3: commands to the browser, fd 4: replies and events, each a JSON text ending in NUL)."""

    def __init__(self, binary: str, profile: Path) -> None:
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

        self._log = open(profile / "chromium.log", "wb")
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
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

    def wait_event(self, method: str, session: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no {method} within {timeout} s")
            try:
                ev = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev

    def inspect(self, url: str, script: str, timeout: float = 60) -> dict:
        """Open ``url`` in a fresh tab, wait for its load event, return the JSON that ``script``
        (an expression evaluating to a Promise of a JSON string) produces."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            self.send("Page.enable", session=session)
            self.send("Page.navigate", {"url": url}, session=session)
            self.wait_event("Page.loadEventFired", session, timeout)
            res = self.send("Runtime.evaluate", {"expression": script, "awaitPromise": True, "returnByValue": True},
                            session=session, timeout=timeout)
            if "exceptionDetails" in res:
                raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
            return json.loads(res["result"]["value"])
        finally:
            self.send("Target.closeTarget", {"targetId": target})

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


#: What a page shows: images (loaded eagerly, then measured), error blocks, headings, navigation.
PAGE_SCRIPT = """
(async () => {
  const main = document.querySelector('main') || document.body;
  const imgs = Array.from(main.querySelectorAll('img'));
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  await Promise.all(imgs.map(i => i.decode ? i.decode().catch(() => null) : null));
  const text = main.innerText || '';
  return JSON.stringify({
    title: document.title,
    h1: Array.from(main.querySelectorAll('h1')).map(h => h.textContent.replace('#', '').trim()),
    images: imgs.map(i => ({src: i.getAttribute('src'), width: i.naturalWidth, height: i.naturalHeight})),
    errors: main.querySelectorAll('%s').length,
    traceback: /Traceback \\(most recent call last\\)|Error Traceback/.test(text),
    nav: Array.from(document.querySelectorAll('nav.bd-docs-nav a, .bd-sidebar-primary a.reference'))
            .map(a => a.getAttribute('href')),
    next: (document.querySelector('a.right-next') || {}).href || null,
    glossary: main.querySelectorAll('dl.glossary dt').length,
    citations: main.querySelectorAll('.bibliography .citation, div.citation, dl.citation dt, .footnote-list div').length,
    text: text,
  });
})()
""" % ERROR_SELECTOR


# -- the built book ---------------------------------------------------------------------------
def _execute(md: Path, out: Path, env: dict) -> str | None:
    """Execute one chapter (FAST) into ``out``; the error text, or None when every cell ran."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.read(md)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(CHAPTERS)}})
    error = None
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        error = str(e)[-2000:]
    nbformat.write(nb, out)
    return error


class Book:
    def __init__(self, html: Path, errors: dict[str, str | None], log: str, seconds: dict[str, float],
                 notebooks: Path) -> None:
        self.html, self.errors, self.log, self.seconds, self.notebooks = html, errors, log, seconds, notebooks


@pytest.fixture(scope="session")
def book(tmp_path_factory) -> Book:
    src = tmp_path_factory.mktemp("book-src")
    # the chapters' kernels: FAST mode, and the inline backend (MPLBACKEND=Agg would drop every figure)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["DEVPLACE_FAST"] = "1"
    seconds: dict[str, float] = {}

    def run(name: str):
        t = time.perf_counter()
        err = _execute(CHAPTERS / f"{name}.md", src / f"{name}.ipynb", env)
        seconds[name] = time.perf_counter() - t
        return name, err

    with ThreadPoolExecutor(max_workers=2) as pool:
        errors = dict(pool.map(run, NOTEBOOK_PAGES))
    for f in toc_files():
        if f not in NOTEBOOK_PAGES:
            shutil.copy2(CHAPTERS / f"{f}.md", src / f"{f}.md")
    for pattern in PAGES_COPIED:
        for p in CHAPTERS.glob(pattern):
            shutil.copy2(p, src / p.name)
    config = yaml.safe_load((CHAPTERS / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"  # executed above
    (src / "_config.yml").write_text(yaml.safe_dump(config))
    jb = Path(sys.executable).with_name("jupyter-book")
    jb = str(jb) if jb.exists() else shutil.which("jupyter-book")
    if jb is None:
        pytest.skip("jupyter-book is not installed (the book extra)")
    out = tmp_path_factory.mktemp("book-out")
    t = time.perf_counter()
    r = subprocess.run([jb, "build", str(src), "--path-output", str(out), "--keep-going"],
                       capture_output=True, text=True, timeout=900, env=env)
    seconds["jupyter-book build"] = time.perf_counter() - t
    html = out / "_build" / "html"
    assert r.returncode == 0 and html.is_dir(), f"jupyter-book build failed:\n{(r.stdout + r.stderr)[-3000:]}"
    timing = ROOT / "build" / "book-test-timings.json"
    timing.parent.mkdir(exist_ok=True)
    timing.write_text(json.dumps({k: round(v, 2) for k, v in seconds.items()}, indent=1))
    return Book(html, errors, r.stdout + r.stderr, seconds, src)


@pytest.fixture(scope="session")
def browser():
    binary = install_chromium()
    profile = Path(tempfile.mkdtemp(prefix="devplace-chromium-"))
    b = Browser(binary, profile)
    try:
        b.send("Browser.getVersion", timeout=60)
    except RuntimeError as e:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
        pytest.fail(f"chromium started but does not answer over the DevTools pipe: {e}; "
                    f"log: {(profile / 'chromium.log').read_text(errors='replace')[-500:]}")
    yield b
    b.close()
    shutil.rmtree(profile, ignore_errors=True)


def visible_images(nb_path: Path) -> int:
    """Figures the reader should see: image outputs of cells not tagged to hide them."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or HIDDEN & set(cell.metadata.get("tags", [])):
            continue
        count += sum(1 for o in cell.get("outputs", []) if {"image/png", "image/svg+xml", "image/jpeg"} & set(o.get("data", {})))
    return count


def page(browser: Browser, book: Book, name: str) -> dict:
    path = book.html / f"{name}.html"
    assert path.exists(), f"{name}.html was not built"
    return browser.inspect(path.as_uri(), PAGE_SCRIPT)


# -- the tests --------------------------------------------------------------------------------
def test_toc_names_existing_files():
    for f in toc_files():
        assert (CHAPTERS / f"{f}.md").exists() or f == "genindex", f"_toc.yml names {f}, which does not exist"
    assert {"notation", "bibliography", "genindex"} <= set(toc_files())


@pytest.mark.parametrize("name", [f for f in NOTEBOOK_PAGES])
def test_chapters_use_the_book_style(name):
    text = (CHAPTERS / f"{name}.md").read_text(encoding="utf-8")
    if re.search(r"\bplt\.|matplotlib", text):
        assert "use_style()" in text, f"{name} draws figures but never calls devplace_lite.plot.use_style()"


@pytest.mark.slow
def test_book_builds_without_warnings(book):
    warnings = [ln for ln in book.log.splitlines() if "WARNING" in ln and "Kernel is running over TCP" not in ln]
    assert not warnings, "\n".join(warnings[:20])


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapter_renders(book, browser, name):
    assert book.errors[name] is None, f"{name} failed to execute (FAST):\n{book.errors[name]}"
    info = page(browser, book, name)
    assert info["h1"], f"{name}: no title on the page"
    assert info["errors"] == 0 and not info["traceback"], f"{name}: the page shows error output"
    broken = [i["src"] for i in info["images"] if not (i["width"] > 0 and i["height"] > 0)]
    assert not broken, f"{name}: images that did not load: {broken}"
    expected = visible_images(book.notebooks / f"{name}.ipynb")
    assert len(info["images"]) >= expected, f"{name}: {expected} figures in the notebook, {len(info['images'])} on the page"
    others = [f for f in toc_files() if f != name]
    linked = {re.sub(r"(\.html)?(#.*)?$", "", h).split("/")[-1] for h in info["nav"] if h}
    assert set(others) - {"genindex"} <= linked | {"index"}, f"{name}: the sidebar misses {set(others) - linked}"
    if name != toc_files()[-1]:
        assert info["next"], f"{name}: no link to the next page"


@pytest.mark.slow
def test_preface_has_a_chapter_map(book, browser):
    info = page(browser, book, toc_files()[0])
    for ch in ("01", "02", "05", "08"):
        assert re.search(rf"\b{ch}\b", info["text"]), f"the chapter map misses chapter {ch}"


@pytest.mark.slow
def test_reference_pages(book, browser):
    notation = page(browser, book, "notation")
    assert notation["glossary"] >= 10 and notation["errors"] == 0
    assert "max-load" in notation["text"] and "ideal" in notation["text"]
    bib = page(browser, book, "bibliography")
    for author in ("Tarnawski", "Archer", "Tavarageri", "Addanki", "Huang", "Narayanan", "Kim"):
        assert author in bib["text"], f"the bibliography misses {author}"
    index = page(browser, book, "genindex")
    for term in ("bubble", "chain of ideals", "max-load", "self-grading check"):
        assert term in index["text"], f"the index misses {term!r}"


def test_page_check_catches_broken_pages(browser, tmp_path):
    """The checks above can fail: a page with a broken image and an error block is caught."""
    import base64

    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    (tmp_path / "ok.png").write_bytes(png)
    (tmp_path / "page.html").write_text(
        "<html><body><main><h1>T</h1><img src='ok.png'><img src='missing.png'>"
        "<div class='cell_output'><div class='output traceback'>ZeroDivisionError</div></div></main></body></html>")
    info = browser.inspect((tmp_path / "page.html").as_uri(), PAGE_SCRIPT)
    sizes = sorted((i["src"], i["width"] > 0) for i in info["images"])
    assert sizes == [("missing.png", False), ("ok.png", True)]
    assert info["errors"] == 1 and info["h1"] == ["T"]
