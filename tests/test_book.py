"""The rendered book: every page of the table of contents, built in FAST mode, opened in headless
Chromium, as a reader sees it.

The book is built once per session, the way ``make book`` builds it (``devplace_lite.book``):
every chapter executed two at a time in FAST mode, **with two busy processes beside them** (so
every assert cell of every chapter runs once on a loaded 2-core machine), then ``jupyter-book
build`` on the executed notebooks. Each page must show

* every figure its notebook produced, and no error output;
* no raw pipe table (a markdown table printed as text), no TeX source where a formula should be
  typeset, no formula set as code;
* no code block wider than its column;
* nothing loaded from another host: every request the page makes is a local file (the test
  passes with the network unplugged);
* launch links (Colab, Binder) to the executed notebook that the publishing workflow puts on
  the gh-pages branch, whose first cell installs the library.

One screenshot per page lands in ``build/screens/``. Chromium is Debian's ``chromium`` package,
installed here when missing and running as root (apt-get); the test skips, saying why, only where
it cannot be installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="PyYAML comes with jupyter-book (the book extra)")

from devplace_lite import book as bk  # noqa: E402

ROOT = bk.ROOT
CHAPTERS = bk.CHAPTERS
SCREENS = ROOT / "build" / "screens"
HIDDEN = {"remove-cell", "remove-output"}
#: Where the launch links of the test build point (never contacted).
STAND_IN_REPO = "https://github.com/devplace-lite-stand-in/devplace_lite"
#: myst-nb renders an error output as div.output.traceback (and stderr as div.output.stderr)
ERROR_SELECTOR = ".output.traceback, .output.error, div.traceback"
NOTEBOOK_PAGES = bk.notebook_pages()
BUSY = 2
#: Chapters that print results tables, and chapters with formulas in their prose.
TABLES = {"01_placement_problem", "02_dp_over_ideals", "03_throughput_ip", "04_latency_ip", "05_lower_bounds",
          "06_heuristics", "08_torch_pipeline"}
MATH = {"01_placement_problem", "02_dp_over_ideals", "03_throughput_ip", "04_latency_ip", "05_lower_bounds",
        "07_rl_placement", "08_torch_pipeline"}


def toc_files() -> list[str]:
    return bk.toc_files()


# -- Chromium -----------------------------------------------------------------------------------
def install_chromium() -> str:
    """Path of a Chromium binary, installing Debian's package when missing (root only)."""
    found = bk.find_chromium()
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
        if step[1] == "update" and bk.find_chromium():
            break
        r = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
        log = (r.stdout + r.stderr)[-400:]
        if step[1] == "install" and r.returncode == 0:
            break
    found = bk.find_chromium()
    if not found:
        pytest.skip(f"chromium could not be installed with apt-get: {' '.join(log.split())}")
    return found


#: What a page shows, once its images have loaded and MathJax has typeset it.
PAGE_SCRIPT = r"""
(async () => {
  const main = document.querySelector('main') || document.body;
  const imgs = Array.from(main.querySelectorAll('img'));
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  await Promise.all(imgs.map(i => i.decode ? i.decode().catch(() => null) : null));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  if (window.MathJax && MathJax.typesetPromise) { await MathJax.typesetPromise(); }
  const text = main.innerText || '';
  // prose and outputs without code: where a raw table or raw TeX would show
  const prose = main.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, mjx-container, mjx-assistive-mml, .highlight').forEach(e => e.remove());
  const proseText = prose.textContent || '';
  const rawTable = (proseText.match(/\|\s*:?-{3,}:?\s*\|/g) || []).length;
  const rawTex = (proseText.match(/\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*\$|\\(frac|sum|mathrm|le|ge|subseteq|setminus|max|min|lvert|dots|textstyle)\b/g) || []);
  const untypeset = Array.from(main.querySelectorAll('span.math, div.math')).filter(e => !e.querySelector('mjx-container')).length;
  const inlineCode = Array.from(main.querySelectorAll('code')).filter(c => !c.closest('pre, .highlight'));
  const mathAsCode = inlineCode.map(c => c.textContent).filter(t => /<=|>=|⊆|∈|∪|\\[a-z]+|\bsum_[a-z{]|\bmax_[a-z]\b|\bmin_[a-z]\b|\bT_(chain|any)\b| \/ k\b|\^/.test(t));
  const wideCode = Array.from(main.querySelectorAll('div.highlight pre, div.cell_output pre'))
      .filter(p => p.scrollWidth > p.clientWidth + 2).map(p => p.textContent.slice(0, 80));
  const external = Array.from(document.querySelectorAll('script[src], link[rel~="stylesheet"][href], img[src], iframe[src]'))
      .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => /^(https?:)?\/\//.test(u));
  const launch = Array.from(document.querySelectorAll('a')).filter(a => /colab|binder/i.test(a.href))
      .map(a => a.href);
  return JSON.stringify({
    title: document.title,
    h1: Array.from(main.querySelectorAll('h1')).map(h => h.textContent.replace('#', '').trim()),
    images: imgs.map(i => ({src: i.getAttribute('src'), width: i.naturalWidth, height: i.naturalHeight})),
    errors: main.querySelectorAll('%s').length,
    traceback: /Traceback \(most recent call last\)|Error Traceback/.test(text),
    nav: Array.from(document.querySelectorAll('nav.bd-docs-nav a, .bd-sidebar-primary a.reference'))
            .map(a => a.getAttribute('href')),
    next: (document.querySelector('a.right-next') || {}).href || null,
    glossary: main.querySelectorAll('dl.glossary dt').length,
    citations: main.querySelectorAll('.bibliography .citation, div.citation, dl.citation dt, .footnote-list div').length,
    tables: main.querySelectorAll('table').length,
    math: main.querySelectorAll('mjx-container').length,
    rawTable, rawTex, untypeset, mathAsCode, wideCode, external, launch,
    text: text,
  });
})()
""" % ERROR_SELECTOR


def problems(info: dict) -> list[str]:
    """What a reader would see wrong on a page (empty when the page is fine)."""
    out = []
    if info["errors"] or info["traceback"]:
        out.append("error output")
    if info["rawTable"]:
        out.append(f"{info['rawTable']} raw pipe table row(s)")
    if info["rawTex"] or info["untypeset"]:
        out.append(f"TeX source shown: {info['rawTex'][:5]} ({info['untypeset']} formulas not typeset)")
    if info["mathAsCode"]:
        out.append(f"formulas set as code: {info['mathAsCode'][:5]}")
    if info["wideCode"]:
        out.append(f"code wider than its column: {info['wideCode'][:3]}")
    local = ("file:", "data:", "about:", "blob:")
    remote = sorted({u for u in info["requests"] if not u.startswith(local)} | set(info["external"]))
    if remote:
        out.append(f"assets from another host: {remote[:5]}")
    return out


# -- the built book -----------------------------------------------------------------------------
class Book:
    def __init__(self, html: Path, errors: dict[str, str | None], log: str, seconds: dict[str, float],
                 notebooks: Path, src: Path) -> None:
        self.html, self.errors, self.log, self.seconds, self.notebooks = html, errors, log, seconds, notebooks
        self.src = src


class Busy:
    """``n`` busy-looping processes (one core each), ended at exit, by a deadline at the latest."""

    def __init__(self, n: int, deadline_s: int = 3600) -> None:
        self.procs = [subprocess.Popen(["timeout", str(deadline_s), "sh", "-c", "while :; do :; done"],
                                       start_new_session=True) for _ in range(n)]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


@pytest.fixture(scope="session")
def book(tmp_path_factory) -> Book:
    executed = tmp_path_factory.mktemp("book-notebooks")
    target = bk.install_target(STAND_IN_REPO, "v0")
    with Busy(BUSY):
        t = time.perf_counter()
        errors, seconds = bk.execute_all(executed, fast=True, target=target)
        seconds["all chapters, two busy processes beside them"] = time.perf_counter() - t
    src = bk.stage(executed, tmp_path_factory.mktemp("book-src"), url=STAND_IN_REPO)
    out = tmp_path_factory.mktemp("book-out")
    t = time.perf_counter()
    try:
        r = bk.build(src, out)
    except RuntimeError as e:
        pytest.skip(str(e))
    seconds["jupyter-book build"] = time.perf_counter() - t
    html = out / "_build" / "html"
    assert r.returncode == 0 and html.is_dir(), f"jupyter-book build failed:\n{(r.stdout + r.stderr)[-3000:]}"
    timing = ROOT / "build" / "book-test-timings.json"
    timing.parent.mkdir(exist_ok=True)
    timing.write_text(json.dumps({k: round(v, 2) for k, v in seconds.items()}, indent=1))
    return Book(html, errors, r.stdout + r.stderr, seconds, executed, src)


@pytest.fixture(scope="session")
def browser():
    binary = install_chromium()
    profile = Path(tempfile.mkdtemp(prefix="devplace-chromium-"))
    # no request may leave the machine: every host resolves to nowhere
    b = bk.Browser(binary, profile, extra_flags=("--host-resolver-rules=MAP * ~NOTFOUND",))
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


def page(browser: bk.Browser, book: Book, name: str) -> dict:
    path = book.html / f"{name}.html"
    assert path.exists(), f"{name}.html was not built"
    return browser.inspect(path.as_uri(), PAGE_SCRIPT, timeout=120, screenshot=SCREENS / f"{name}.png")


# -- the tests ----------------------------------------------------------------------------------
def test_toc_names_existing_files():
    for f in toc_files():
        assert (CHAPTERS / f"{f}.md").exists() or f == "genindex", f"_toc.yml names {f}, which does not exist"
    assert {"notation", "bibliography", "genindex"} <= set(toc_files())


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapters_use_the_book_style(name):
    text = (CHAPTERS / f"{name}.md").read_text(encoding="utf-8")
    if re.search(r"\bplt\.|matplotlib", text):
        assert "use_style()" in text, f"{name} draws figures but never calls devplace_lite.plot.use_style()"


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_first_cell_installs_the_library(name):
    """Colab and Binder open the notebook with nothing installed: its first code cell installs the
    library from INSTALL_FROM, which the published notebooks point at the project's repository."""
    import jupytext

    nb = jupytext.read(CHAPTERS / f"{name}.md")
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert bk.INSTALL_LINE.search(first.source) and "pip" in first.source, f"{name}: the first code cell does not install the library"
    assert "hide-cell" in first.metadata.get("tags", [])
    assert bk.stamp_install(nb, "devplace_lite @ git+https://example.org/x@v1")
    assert 'INSTALL_FROM = "devplace_lite @ git+https://example.org/x@v1"' in first.source


@pytest.mark.slow
def test_install_cell_installs_from_a_repository_url(tmp_path):
    """The install cell, stamped with a stand-in repository (a local bare clone of this checkout,
    by a file:// URL), installs the library where none is importable. The cell runs in an
    interpreter that cannot see the installed library (python -S), and pip installs into a
    folder of the test (no dependencies, the build backend already here: nothing downloaded)."""
    import jupytext

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True) \
        if shutil.which("git") else None
    if head is None or head.returncode != 0:
        pytest.skip("needs git and a git checkout")
    bare = tmp_path / "stand-in.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(ROOT), str(bare)], check=True)
    nb = jupytext.read(CHAPTERS / "01_placement_problem.md")
    assert bk.stamp_install(nb, bk.install_target(bare.as_uri(), head.stdout.strip()))
    cell = next(c for c in nb.cells if c.cell_type == "code").source
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_TARGET=str(target), PIP_NO_DEPS="1", PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    cfg = tmp_path / "pip.conf"
    cfg.write_text("[install]\nno-build-isolation = false\n")  # pip reads "false" here as: no isolation
    env["PIP_CONFIG_FILE"] = str(cfg)
    r = subprocess.run([sys.executable, "-S", "-c", cell], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (target / "devplace_lite" / "graph.py").exists() and (target / "devplace_lite" / "book.py").exists()
    dist = list(target.glob("devplace_lite-*.dist-info"))
    assert dist and "file://" in (dist[0] / "direct_url.json").read_text()


@pytest.mark.slow
def test_every_chapter_runs_under_load(book):
    """Every chapter, with its assert cells, executed with two busy processes beside it."""
    failed = {name: err for name, err in book.errors.items() if err}
    assert not failed, "\n\n".join(f"{n} failed with {BUSY} busy processes beside it:\n{e}" for n, e in failed.items())


@pytest.mark.slow
def test_book_builds_without_warnings(book):
    warnings = [ln for ln in book.log.splitlines() if "WARNING" in ln and "Kernel is running over TCP" not in ln]
    assert not warnings, "\n".join(warnings[:20])


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapter_renders(book, browser, name):
    assert book.errors[name] is None, f"{name} failed to execute (FAST, under load):\n{book.errors[name]}"
    info = page(browser, book, name)
    assert info["h1"], f"{name}: no title on the page"
    assert not problems(info), f"{name}: {'; '.join(problems(info))}"
    broken = [i["src"] for i in info["images"] if not (i["width"] > 0 and i["height"] > 0)]
    assert not broken, f"{name}: images that did not load: {broken}"
    expected = visible_images(book.notebooks / f"{name}.ipynb")
    assert len(info["images"]) >= expected, f"{name}: {expected} figures in the notebook, {len(info['images'])} on the page"
    others = [f for f in toc_files() if f != name]
    linked = {re.sub(r"(\.html)?(#.*)?$", "", h).split("/")[-1] for h in info["nav"] if h}
    assert set(others) - {"genindex"} <= linked | {"index"}, f"{name}: the sidebar misses {set(others) - linked}"
    if name != toc_files()[-1]:
        assert info["next"], f"{name}: no link to the next page"
    if name in TABLES:
        assert info["tables"] >= 1, f"{name}: its results tables are not on the page as tables"
    if name in MATH:
        assert info["math"] >= 5, f"{name}: {info['math']} formulas typeset"
    # launch links: Colab and Binder open the executed notebook on the gh-pages branch
    org_repo = STAND_IN_REPO.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{org_repo}/blob/gh-pages/notebooks/{name}.ipynb"
    binder = f"https://mybinder.org/v2/gh/{org_repo}/gh-pages?urlpath=tree/notebooks/{name}.ipynb"
    assert colab in info["launch"] and binder in info["launch"], f"{name}: launch links {info['launch']}"


@pytest.mark.slow
def test_preface_has_a_chapter_map(book, browser):
    info = page(browser, book, toc_files()[0])
    assert not problems(info), "; ".join(problems(info))
    for ch in ("01", "02", "05", "08"):
        assert re.search(rf"\b{ch}\b", info["text"]), f"the chapter map misses chapter {ch}"


@pytest.mark.slow
def test_reference_pages(book, browser):
    notation = page(browser, book, "notation")
    assert notation["glossary"] >= 10 and not problems(notation), "; ".join(problems(notation))
    assert notation["math"] > 50, "the notation page's formulas are not typeset"
    assert "max-load" in notation["text"] and "ideal" in notation["text"]
    bib = page(browser, book, "bibliography")
    for author in ("Tarnawski", "Archer", "Tavarageri", "Addanki", "Huang", "Narayanan", "Kim"):
        assert author in bib["text"], f"the bibliography misses {author}"
    index = page(browser, book, "genindex")
    for term in ("bubble", "chain of ideals", "max-load", "self-grading check"):
        assert term in index["text"], f"the index misses {term!r}"


@pytest.mark.slow
def test_pdf_holds_every_chapter_with_figures_and_math(book, tmp_path_factory):
    """What `make pdf` does, on the FAST book: the single-page HTML printed by Chromium."""
    binary = install_chromium()
    out = tmp_path_factory.mktemp("book-single")
    r = bk.build(book.src, out, "singlehtml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    pdf = ROOT / "build" / "book-test.pdf"
    seen = bk.print_pdf(out / "_build" / "singlehtml" / f"{toc_files()[0]}.html", pdf, binary)
    titles = " | ".join(seen["titles"])
    for name in NOTEBOOK_PAGES[1:]:   # the preface opens the book; every chapter's title follows
        assert sum(t.startswith(name[:2] + " ") for t in seen["titles"]) >= 1, f"{name} is not in the PDF: {titles}"
    assert not seen["broken"], f"figures missing from the PDF: {seen['broken'][:5]}"
    expected = sum(visible_images(book.notebooks / f"{n}.ipynb") for n in NOTEBOOK_PAGES)
    assert seen["images"] >= expected, f"{expected} figures in the chapters, {seen['images']} in the PDF"
    assert seen["math"] > 300, f"only {seen['math']} formulas typeset"
    data = pdf.read_bytes()
    pages = len(re.findall(rb"/Type\s*/Page\b", data))
    assert data.startswith(b"%PDF") and pages > 50, f"{pages} pages"


def test_publishing_workflow_serves_the_launch_links():
    """The Colab and Binder links point at gh-pages/notebooks/NAME.ipynb: the workflow must put the
    executed notebooks there, from a tag, with the repository stamped into their install cell."""
    import yaml

    config = yaml.safe_load((CHAPTERS / "_config.yml").read_text())
    assert config["repository"]["branch"] == "gh-pages" and config["repository"]["path_to_book"] == "notebooks"
    assert config["launch_buttons"]["colab_url"] and config["launch_buttons"]["binderhub_url"]
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    on = flow.get("on", flow.get(True))   # YAML 1.1 reads the key `on` as True
    assert on["push"]["tags"]
    job = flow["jobs"]["publish"]
    assert "DEVPLACE_REPO_URL" in job["env"] and "DEVPLACE_REPO_REF" in job["env"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    for needed in ("make notebooks", "make book", "make pdf", "cp build/executed/full/*.ipynb site/notebooks/",
                   "gh-pages"):
        assert needed in script, f"the workflow does not {needed!r}"


def test_page_check_catches_broken_pages(browser, tmp_path):
    """The checks above can fail: a broken image, an error block, a raw pipe table, raw TeX, a
    formula set as code, a code block wider than its column and an asset from another host are
    each caught."""
    import base64

    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    (tmp_path / "ok.png").write_bytes(png)
    (tmp_path / "page.html").write_text(
        "<html><body><main style='width:400px'><h1>T</h1><img src='ok.png'><img src='missing.png'>"
        "<div class='cell_output'><div class='output traceback'>ZeroDivisionError</div></div>"
        "<p>| a | b |<br>| --- | ---: |<br>| x | 1 |</p><p>inline \\(G = (V, E)\\) left as source</p>"
        "<p>the bound <code>T_chain &gt;= sum p / k</code></p>"
        "<div class='highlight'><pre style='white-space:pre;overflow:auto'>" + "x = 1; " * 80 + "</pre></div>"
        "<img src='http://example.invalid/logo.png'></main></body></html>")
    info = browser.inspect((tmp_path / "page.html").as_uri(), PAGE_SCRIPT)
    sizes = sorted((i["src"], i["width"] > 0) for i in info["images"])
    assert sizes == [("http://example.invalid/logo.png", False), ("missing.png", False), ("ok.png", True)]
    assert info["errors"] == 1 and info["h1"] == ["T"]
    found = " | ".join(problems(info))
    for what in ("error output", "raw pipe table", "TeX source", "formulas set as code", "code wider", "another host"):
        assert what in found, f"not caught: {what} ({found})"
