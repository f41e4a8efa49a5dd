"""The rendered book: every page of the table of contents, built in FAST mode, opened in headless
Chromium, as a reader sees it.

The book is built once per session, the way ``make book`` builds it (``devplace_course.book``):
every chapter executed two at a time in FAST mode, **with two busy processes beside them** (so
every assert cell of every chapter runs once on a loaded 2-core machine), then ``jupyter-book
build`` on the executed notebooks. Each page must show

* every figure its notebook produced, and no error output, no warning box (stderr);
* no raw pipe table (a markdown table printed as text), no TeX source where a formula should be
  typeset, no formula set as code, no object's repr where its value should be (``<... object>``,
  a dataclass's ``Result(method=...``);
* no code block wider than its column;
* nothing loaded from another host: every request the page makes is a local file (the test
  passes with the network unplugged);
* no table, formula, code block or output wider than its column (``scrollWidth > clientWidth``,
  or reaching past the text column), at a desktop's width and at a small laptop's;
* no path of the machine that built it;
* every interactive figure (`devplace_course.interactive`) moving: each control labelled
  and moved with the keyboard, the figure at each setting the library's recorded answer, the
  page under 2 MB.

The book is built the way a newcomer builds it: ``python -m devplace_course.book html`` and
``pdf`` run in a copy of this checkout whose ``origin`` is a local path (a clone of a clone), so
a repository address the theme cannot parse fails the test. Smaller builds check the launch
links (Colab, Binder) of a GitHub address and that another host, or no git at all, still
builds. The PDF is measured the same way, laid out with print styles at the page's width.

One screenshot per page lands in ``build/screens/``. Chromium is Debian's ``chromium`` package,
installed here when missing and running as root (apt-get, `devplace_course.book.ensure_chromium`);
the test skips, saying why, only where it cannot be installed.
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

from devplace_course import book as bk  # noqa: E402
from devplace_course import notebook as bk_nb  # noqa: E402

ROOT = bk.ROOT
CHAPTERS = bk.CHAPTERS
SCREENS = ROOT / "build" / "screens"
HIDDEN = {"remove-cell", "remove-output"}
#: Where the launch links of the test build point (never contacted).
STAND_IN_REPO = "https://github.com/devplace-lite-stand-in/devplace_lite"
#: myst-nb renders an error output as div.output.traceback (and stderr as div.output.stderr)
ERROR_SELECTOR = ".output.traceback, .output.error, div.traceback"
NOTEBOOK_PAGES = bk.notebook_pages()
#: A chapter's first code cell, one line: the library, the notebook helper, FAST and the seeded generator.
OPENING = "import devplace_lite as dl, devplace_course.notebook as nb; FAST, rng = nb.start()"


BUSY = 2
#: Chapters that print results tables, and chapters with formulas in their prose.
TABLES = {"01_placement_problem", "02_dp_over_ideals", "03_throughput_ip", "04_latency_ip", "05_lower_bounds",
          "06_heuristics", "07_rl_placement", "08_torch_pipeline", "09_parallelism", "90_reproduction"}
MATH = {"01_placement_problem", "02_dp_over_ideals", "03_throughput_ip", "04_latency_ip", "05_lower_bounds",
        "07_rl_placement", "08_torch_pipeline", "09_parallelism"}


def toc_files() -> list[str]:
    return bk.toc_files()


# -- Chromium -----------------------------------------------------------------------------------
def install_chromium() -> str:
    """Path of a Chromium binary, installing Debian's package when missing (root only)."""
    try:
        return bk.ensure_chromium()
    except bk.ChromiumMissing as e:
        pytest.skip(str(e))


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
  if (window.devplaceFit) { devplaceFit(); }
  const text = main.innerText || '';
  // prose and outputs without code: where a raw table or raw TeX would show
  const prose = main.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, mjx-container, mjx-assistive-mml, .highlight').forEach(e => e.remove());
  const proseText = prose.textContent || '';
  const rawTable = (proseText.match(/\|\s*:?-{3,}:?\s*\|/g) || []).length;
  const rawTex = (proseText.match(/\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*\$|\\(frac|sum|mathrm|le|ge|subseteq|setminus|max|min|lvert|dots|textstyle)\b/g) || []);
  const untypeset = Array.from(main.querySelectorAll('span.math, div.math')).filter(e => !e.querySelector('mjx-container')).length;
  // an object's repr where its value should be: `<pkg.Cls object at 0x..>`, `<... at 0x..>`, or a
  // dataclass's `Name(field=...` opening a line of a cell's output
  const reprs = Array.from(main.querySelectorAll('.cell_output')).flatMap(o =>
      (o.textContent || '').match(/<[A-Za-z_][\w.]* (?:object(?: at 0x[0-9a-f]+)?|at 0x[0-9a-f]+)>|^\s*[A-Z]\w*\([a-z_]\w*=[^\n]{0,40}/gm) || [])
      .map(t => t.trim());
  const inlineCode = Array.from(main.querySelectorAll('code')).filter(c => !c.closest('pre, .highlight'));
  const mathAsCode = inlineCode.map(c => c.textContent).filter(t => /<=|>=|⊆|∈|∪|\\[a-z]+|\bsum_[a-z{]|\bmax_[a-z]\b|\bmin_[a-z]\b|\bT_(chain|any)\b| \/ k\b|\^/.test(t));
  const wide = JSON.parse(__OVERFLOW__);
  const external = Array.from(document.querySelectorAll('script[src], link[rel~="stylesheet"][href], img[src], iframe[src]'))
      .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => /^(https?:)?\/\//.test(u));
  const launch = Array.from(document.querySelectorAll('a')).filter(a => /colab|binder/i.test(a.href))
      .map(a => a.href);
  return JSON.stringify({
    title: document.title,
    h1: Array.from(main.querySelectorAll('h1')).map(h => h.textContent.replace('#', '').trim()),
    images: imgs.map(i => ({src: i.getAttribute('src'), width: i.naturalWidth, height: i.naturalHeight})),
    errors: main.querySelectorAll('%s').length,
    warnings: Array.from(main.querySelectorAll('.output.stderr')).map(e => e.textContent.trim().slice(0, 160)),
    traceback: /Traceback \(most recent call last\)|Error Traceback/.test(text),
    nav: Array.from(document.querySelectorAll('nav.bd-docs-nav a, .bd-sidebar-primary a.reference'))
            .map(a => a.getAttribute('href')),
    next: (document.querySelector('a.right-next') || {}).href || null,
    glossary: main.querySelectorAll('dl.glossary dt').length,
    citations: main.querySelectorAll('.bibliography .citation, div.citation, dl.citation dt, .footnote-list div').length,
    tables: main.querySelectorAll('table').length,
    math: main.querySelectorAll('mjx-container').length,
    rawTable, rawTex, untypeset, mathAsCode, reprs, wide, external, launch,
    text: text,
  });
})()
""".replace("%s", ERROR_SELECTOR).replace("__OVERFLOW__", bk.OVERFLOW.strip())


def problems(info: dict) -> list[str]:
    """What a reader would see wrong on a page (empty when the page is fine)."""
    out = []
    if info["errors"] or info["traceback"]:
        out.append("error output")
    if info.get("warnings"):
        out.append(f"warning box: {info['warnings'][:3]}")
    if info["rawTable"]:
        out.append(f"{info['rawTable']} raw pipe table row(s)")
    if info["reprs"]:
        out.append(f"an object's repr as output: {info['reprs'][:3]}")
    if info["rawTex"] or info["untypeset"]:
        out.append(f"TeX source shown: {info['rawTex'][:5]} ({info['untypeset']} formulas not typeset)")
    if info["mathAsCode"]:
        out.append(f"formulas set as code: {info['mathAsCode'][:5]}")
    if info["wide"]:
        out.append(f"wider than its column: {info['wide'][:4]}")
    if info.get("paths"):
        out.append(f"paths of the building machine: {info['paths']}")
    local = ("file:", "data:", "about:", "blob:")
    remote = sorted({u for u in info["requests"] if not u.startswith(local)} | set(info["external"]))
    if remote:
        out.append(f"assets from another host: {remote[:5]}")
    return out


# -- the built book -----------------------------------------------------------------------------
def checkout_copy(dest: Path, origin: str | None) -> Path:
    """A copy of this checkout (its tracked and untracked files, nothing git ignores, plus the
    compiled kernels) as a newcomer gets it: with ``origin`` a git checkout whose ``origin`` is
    that address, with None an unpacked archive (no git at all)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                                capture_output=True, text=True, check=True).stdout.split("\0")
        files = [ROOT / f for f in listed if f]
    else:
        files = [f for f in ROOT.rglob("*") if f.is_file() and not {".venv", "build", "__pycache__", ".git"}
                 & set(f.relative_to(ROOT).parts)]
    files += list((ROOT / "devplace_lite").glob("_aot.*"))
    for f in files:
        if f.is_file():
            (dest / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / f.relative_to(ROOT))
    if origin is not None:
        subprocess.run(["git", "init", "-q", str(dest)], check=True)
        subprocess.run(["git", "-C", str(dest), "remote", "add", "origin", origin], check=True)
    return dest


def book_command(checkout: Path, *args: str, url: str | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``python -m devplace_course.book ARGS --fast`` in ``checkout``, with its own copy of the
    library (what ``make book`` and ``make pdf`` run there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEVPLACE_REPO_URL", "DEVPLACE_REPO_REF")}
    env["PYTHONPATH"] = str(checkout)
    if url:
        env["DEVPLACE_REPO_URL"] = url
    return subprocess.run([sys.executable, "-m", "devplace_course.book", *args, "--fast"], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=timeout)


class Book:
    def __init__(self, checkout: Path, errors: dict[str, str | None], result: subprocess.CompletedProcess,
                 seconds: dict[str, float]) -> None:
        self.checkout, self.errors, self.result, self.seconds = checkout, errors, result, seconds
        self.log = result.stdout + result.stderr
        self.notebooks = checkout / "build" / "executed" / "fast"
        self.src = checkout / "build" / "book-src"
        self.html = checkout / "build" / "book" / "_build" / "html"


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
    """The book built as ``make book`` builds it, in a clone whose ``origin`` is a local path."""
    pytest.importorskip("jupyter_book", reason="jupyter-book (the book extra) is not installed")
    checkout = checkout_copy(tmp_path_factory.mktemp("clone") / "devplace_lite", origin=str(ROOT))
    assert bk.repo_url(checkout) is None  # a local path is no address to publish
    with Busy(BUSY):
        t = time.perf_counter()
        errors, seconds = bk.execute_all(checkout / "build" / "executed" / "fast", fast=True,
                                         chapters=checkout / "chapters", target=bk.install_target(None))
        seconds["all chapters, two busy processes beside them"] = time.perf_counter() - t
    t = time.perf_counter()
    result = book_command(checkout, "html")
    seconds["jupyter-book build"] = time.perf_counter() - t
    timing = ROOT / "build" / "book-test-timings.json"
    timing.parent.mkdir(exist_ok=True)
    timing.write_text(json.dumps({k: round(v, 2) for k, v in seconds.items()}, indent=1))
    return Book(checkout, errors, result, seconds)


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
        count += sum(1 for o in cell.get("outputs", []) if {"image/png", "image/svg+xml", "image/jpeg"} & set(o.get("data", {}))
                     and "dl-figure" not in o.get("data", {}).get("text/html", ""))  # the page draws that one moving
    return count


#: A small laptop's window: the theme's column is narrowest here (the sidebar still shows).
LAPTOP = 1024
#: What a page must never contain: paths of the machine that built it.
def machine_paths(book: Book) -> list[str]:
    return [str(ROOT) + "/", str(book.checkout) + "/", "site-packages/", str(Path.home()).rstrip("/") + "/",
            str(Path(sys.prefix)) + "/"]


def page(browser: bk.Browser, book: Book, name: str, width: int = 1280) -> dict:
    path = book.html / f"{name}.html"
    assert path.exists(), f"{name}.html was not built"
    shot = SCREENS / (f"{name}.png" if width == 1280 else f"{name}-{width}.png")
    info = browser.inspect(path.as_uri(), PAGE_SCRIPT, timeout=120, screenshot=shot, width=width)
    html = path.read_text(encoding="utf-8", errors="replace")
    info["paths"] = [m for m in machine_paths(book) if m in html and m not in ("/", "//")]
    return info


# -- the tests ----------------------------------------------------------------------------------
def test_toc_names_existing_files():
    for f in toc_files():
        assert (CHAPTERS / f"{f}.md").exists() or f == "genindex", f"_toc.yml names {f}, which does not exist"
    assert {"notation", "bibliography", "genindex"} <= set(toc_files())


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapters_use_the_book_style(name):
    text = (CHAPTERS / f"{name}.md").read_text(encoding="utf-8")
    if re.search(r"\bplt\.|matplotlib", text):
        assert "nb.start()" in text, f"{name} draws figures but never calls devplace_course.notebook.start()"


#: The widest code line a reader sees: the page shows a code cell in a box about 88-95 monospace
#: characters wide at a 1280 px window, and wraps a longer line mid-token.
CODE_WIDTH = 88


def visible_code_lines(md: Path):
    """(cell number, line) of every line of a code cell a reader sees (jupytext's cells, those
    not tagged remove-cell or remove-input)."""
    import jupytext

    for k, cell in enumerate(jupytext.read(md).cells):
        if cell.cell_type == "code" and not {"remove-cell", "remove-input"} & set(cell.metadata.get("tags", [])):
            yield from ((k, line) for line in cell.source.splitlines())


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapters_code_fits_the_page(name):
    """Every code line a reader sees fits the page's code box, the opening line included."""
    wide = [f"{name}.md, cell {k}: {len(line)} characters: {line.strip()[:40]}"
            for k, line in visible_code_lines(CHAPTERS / f"{name}.md") if len(line) > CODE_WIDTH]
    assert not wide, f"code lines over {CODE_WIDTH} characters (the page wraps them):\n" + "\n".join(wide)


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_chapters_open_with_one_line(name):
    """A chapter opens with the one line (no install cell, no block of imports: the rest is
    imported where it is taught)."""
    import jupytext

    nb = jupytext.read(CHAPTERS / f"{name}.md")
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source.strip() == OPENING, f"{name}: the first code cell is not the opening line"
    assert not any(bk_nb.INSTALL_LINE.search(c.source) for c in nb.cells if c.cell_type == "code"), \
        f"{name}: the source chapter has an install cell (the published notebooks get theirs from the book)"


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_published_notebook_installs_the_library_first(name):
    """Colab and Binder open the published notebook with nothing installed: its first code cell
    installs the library from INSTALL_FROM (the project's repository), folded, and the chapter's
    own opening comes right after it; stamping twice leaves one install cell."""
    import jupytext

    nb = jupytext.read(CHAPTERS / f"{name}.md")
    n_cells = len(nb.cells)
    for target in ("devplace_lite @ git+https://example.org/x@v0", "devplace_lite @ git+https://example.org/x@v1"):
        bk.stamp_install(nb, target)
    code = [c for c in nb.cells if c.cell_type == "code"]
    first = code[0]
    assert len(nb.cells) == n_cells + 1 and bk_nb.INSTALL_LINE.search(first.source) and "pip" in first.source
    assert 'INSTALL_FROM = "devplace_lite @ git+https://example.org/x@v1"' in first.source
    assert "hide-cell" in first.metadata.get("tags", [])
    assert code[1].source.strip() == OPENING
    assert nb.cells.index(first) > 0 and nb.cells[0].source.startswith("# "), f"{name}: the install cell went before the title"


def test_student_notebooks_install_the_library_first(tmp_path):
    """The student edition's notebooks (handed out, opened in Colab) carry the install cell in
    front; its MyST chapters, like the book's, do not."""
    import jupytext

    from devplace_course.student import make_student

    make_student(CHAPTERS, tmp_path / "edition")
    for name in NOTEBOOK_PAGES:
        handed = jupytext.read(tmp_path / "edition" / "notebooks" / f"{name}.ipynb")
        first = next(c for c in handed.cells if c.cell_type == "code")
        assert bk_nb.INSTALL_LINE.search(first.source) and f'INSTALL_FROM = "{bk_nb.DEFAULT_TARGET}"' in first.source, name
        md = (tmp_path / "edition" / "chapters" / f"{name}.md").read_text(encoding="utf-8")
        assert "INSTALL_FROM" not in md, name


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
    bk.stamp_install(nb, bk.install_target(bare.as_uri(), head.stdout.strip()))
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
    assert (target / "devplace_lite" / "graph.py").exists() and (target / "devplace_course" / "book.py").exists()
    dist = list(target.glob("devplace_lite-*.dist-info"))
    assert dist and "file://" in (dist[0] / "direct_url.json").read_text()


def small_toc(src: Path, root: str, chapters: list[str]) -> None:
    """A table of contents of a few chapters, with the reference pages they link to."""
    files = [*chapters, "notation", "bibliography", "genindex"]
    (src / "_toc.yml").write_text(f"format: jb-book\nroot: {root}\nchapters:\n"
                                  + "".join(f"  - file: {f}\n" for f in files))


@pytest.mark.slow
def test_book_builds_from_a_clone_of_a_local_path(book):
    """`make book` in a clone whose origin is a local path: built, with one note that the launch
    links are left out, and the success lines only after the build succeeded."""
    out = book.result.stdout
    assert book.result.returncode == 0, f"the book did not build:\n{book.log[-3000:]}"
    assert "launch links (Colab, Binder) left out" in out and "DEVPLACE_REPO_URL" in out, out[-1000:]
    assert re.search(r"^open .*index\.html$", out, re.M) and book.html.is_dir()
    assert "Traceback" not in book.log


def test_a_failed_build_prints_no_success_line(tmp_path, monkeypatch, capsys):
    """No executed notebooks: the build stops with one line, and never says `open ...`."""
    monkeypatch.setattr(bk, "EXECUTED", tmp_path / "executed")
    assert bk.main(["html", "--fast"]) == 2
    out, err = capsys.readouterr()
    assert "open " not in out and "no warnings" not in out and "not executed yet" in err


def test_executing_a_chapter_prints_no_kernel_warning(tmp_path):
    """`make book` executes each chapter in a fresh kernel: the kernel's own log (its stderr,
    which the build's terminal shows) has no warning, e.g. ipykernel's about plain-text TCP."""
    md = tmp_path / "01_tiny.md"
    md.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                  "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
                  "# Tiny\n\n```{code-cell} ipython3\nprint(6 * 7)\n```\n")
    script = ("import sys; from pathlib import Path; from devplace_course import book as bk; "
              "p = Path(sys.argv[1]); sys.exit(bk.execute(p, p.with_suffix('.ipynb'), bk.kernel_env(True), p.parent) is not None)")
    r = subprocess.run([sys.executable, "-c", script, str(md)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "42" in md.with_suffix(".ipynb").read_text()
    assert "WARNING" not in r.stderr and "WARNING" not in r.stdout, r.stderr[-2000:]


def test_pdf_without_chromium_stops_with_one_line(monkeypatch, capsys):
    """No Chromium and no way to install it (not root): `make pdf` says which package, in one
    line, before building anything, and exits 2."""
    monkeypatch.setattr(bk, "find_chromium", lambda: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bk.main(["pdf", "--fast"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "chromium package" in err and "Traceback" not in err, err


@pytest.mark.parametrize("origin, expected", [
    ("git@github.com:devplace-lite-stand-in/devplace_lite.git", "https://github.com/devplace-lite-stand-in/devplace_lite"),
    ("https://gitlab.com/org/devplace_lite.git", "https://gitlab.com/org/devplace_lite"),
    ("https://git.example.org/org/devplace_lite", "https://git.example.org/org/devplace_lite"),
    ("ssh://git@git.example.org/org/devplace_lite.git", "https://git.example.org/org/devplace_lite"),
    ("/srv/mirrors/devplace_lite", None), ("../devplace_lite", None), ("file:///srv/devplace_lite.git", None),
    (None, None)])
def test_repository_address_from_the_checkout(tmp_path, monkeypatch, origin, expected):
    """Only a web address is ever named (never a path of the building machine); an unpacked
    archive (no git) has none; DEVPLACE_REPO_URL overrides the checkout's origin."""
    monkeypatch.delenv("DEVPLACE_REPO_URL", raising=False)
    root = tmp_path / "checkout"
    root.mkdir()
    if origin is not None:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "remote", "add", "origin", origin], check=True)
    assert bk.repo_url(root) == expected
    note = bk.launch_note(expected)
    assert (note is None) == bool(expected and re.match(r"https://(github|gitlab)\.com/", expected))
    monkeypatch.setenv("DEVPLACE_REPO_URL", STAND_IN_REPO)
    assert bk.repo_url(root) == STAND_IN_REPO


@pytest.mark.slow
@pytest.mark.parametrize("url, links", [(STAND_IN_REPO, {"colab", "binder"}),
                                        ("https://gitlab.com/org/devplace_lite", {"binder"}),
                                        ("https://git.example.org/org/devplace_lite", set())])
def test_launch_links_for_each_host(book, browser, tmp_path, url, links):
    """A book of two pages built for a GitHub, a GitLab and another host's address: it builds
    without a warning, with the launch links that host allows (Colab and Binder open the
    executed notebook that the publishing workflow puts on the gh-pages branch)."""
    name = "01_placement_problem"
    src = bk.stage(book.notebooks, tmp_path / "src", chapters=book.checkout / "chapters", url=url)
    small_toc(src, "00_preface", [name])
    r = bk.build(src, tmp_path / "out")
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-3000:]
    assert not [ln for ln in log.splitlines() if "WARNING" in ln], log[-3000:]
    info = browser.inspect((tmp_path / "out" / "_build" / "html" / f"{name}.html").as_uri(), PAGE_SCRIPT, timeout=120)
    found = {k for k in ("colab", "binder") if any(k in u for u in info["launch"])}
    assert found == links, info["launch"]
    org_repo = STAND_IN_REPO.removeprefix("https://github.com/")
    if "colab" in links:
        assert f"https://colab.research.google.com/github/{org_repo}/blob/gh-pages/notebooks/{name}.ipynb" in info["launch"]
        assert f"https://mybinder.org/v2/gh/{org_repo}/gh-pages?urlpath=tree/notebooks/{name}.ipynb" in info["launch"]


@pytest.mark.slow
def test_every_chapter_runs_under_load(book):
    """Every chapter, with its assert cells, executed with two busy processes beside it."""
    failed = {name: err for name, err in book.errors.items() if err}
    assert not failed, "\n\n".join(f"{n} failed with {BUSY} busy processes beside it:\n{e}" for n, e in failed.items())


@pytest.mark.slow
def test_book_builds_without_warnings(book):
    warnings = [ln for ln in book.log.splitlines() if "WARNING" in ln]
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
    assert not info["launch"], f"{name}: launch links to a local path: {info['launch']}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in toc_files() if n != "genindex"])
def test_nothing_wider_than_its_column_on_a_laptop(book, browser, name):
    info = page(browser, book, name, width=LAPTOP)
    assert not info["wide"], f"{name} at {LAPTOP} px: wider than its column: {info['wide'][:6]}"
    assert not info["paths"], f"{name}: paths of the building machine in the page: {info['paths']}"


@pytest.mark.slow
def test_student_edition_has_no_solutions_and_no_rubrics(book, browser, tmp_path):
    """`html --edition student`, on two chapters: the student edition (devplace_course.student),
    executed, built with its own title; no solution, no answer sketch, no rubric on the page,
    the exercises' checks say "not attempted", and nothing is wider than its column."""
    from devplace_course.student import make_student

    chapters = ["00_preface", "01_placement_problem"]
    edition = tmp_path / "student"
    make_student(book.checkout / "chapters", edition)
    executed = tmp_path / "executed"
    env = bk.kernel_env(True)
    for name in chapters:
        err = bk.execute(edition / "chapters" / f"{name}.md", executed / f"{name}.ipynb", env, edition / "chapters")
        assert err is None, f"the student edition of {name} failed: {err}"
    src = bk.stage(executed, tmp_path / "src", chapters=edition / "chapters", edition="student")
    small_toc(src, chapters[0], chapters[1:])
    r = bk.build(src, tmp_path / "out")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    html = tmp_path / "out" / "_build" / "html" / f"{chapters[1]}.html"
    text = html.read_text(encoding="utf-8")
    assert "student edition" in text
    for banned in ("Rubric", "A sketch of an answer", "tag_solution"):
        assert banned not in text, f"the student edition shows {banned!r}"
    instructor = (book.html / f"{chapters[1]}.html").read_text(encoding="utf-8")
    assert "Rubric" in instructor and "tag_solution" in instructor  # what the student edition leaves out
    info = browser.inspect(html.as_uri(), PAGE_SCRIPT, timeout=120, width=LAPTOP)
    assert "not attempted" in info["text"] and not problems(info), "; ".join(problems(info))


#: The interactive figures (`devplace_course.interactive`) each page must show, by id.
INTERACTIVE = {"01_placement_problem": {"fig-01-bubble"}, "02_dp_over_ideals": {"fig-02-split"},
               "08_torch_pipeline": {"fig-08-schedules"}, "09_parallelism": {"fig-09-plan"}}
#: The most a page may weigh: its HTML and the figures it loads (the theme and MathJax, shared, aside).
PAGE_BYTES = 2 * 2**20


def recorded_figures(nb_path: Path) -> dict[str, dict]:
    """The interactive figures of an executed notebook, by id: what the library computed (the
    frames that the chapter's assert cells checked), read from the notebook, not from the page."""
    import nbformat

    out = {}
    for cell in nbformat.read(nb_path, as_version=4).cells:
        for o in cell.get("outputs", []):
            page = o.get("data", {}).get("text/html", "")
            m = re.search(r'<div class="dl-figure" id="([^"]+)"><script type="application/json">(.*?)</script>', page, re.S)
            if m:
                out[m.group(1)] = json.loads(m.group(2).replace("<\\/", "</"))
    return out


#: What a figure shows now: its key, caption, controls (with their labels) and readout, and
#: how many boxes, lines and dots it draws.
FIGURE_STATE = """JSON.stringify(Array.from(document.querySelectorAll('div.dl-figure')).map(f => ({
  id: f.id, key: f.dataset.key, caption: f.querySelector('.dl-caption').textContent,
  controls: Array.from(f.querySelectorAll('.dl-controls input, .dl-controls select')).map(i => ({
    id: i.id, tag: i.tagName.toLowerCase(), value: i.value,
    label: (f.querySelector(`label[for="${i.id}"]`) || {}).textContent || ''})),
  readout: Array.from(f.querySelectorAll('.dl-readout output')).map(o => [o.dataset.key, o.dataset.value, o.textContent]),
  drawn: [f.querySelectorAll('svg rect.dl-box, svg rect.dl-hatch').length, f.querySelectorAll('svg polyline').length,
          f.querySelectorAll('svg circle').length]})))"""


def press(browser: bk.Browser, session: str, element_id: str, key: str) -> None:
    """Focus ``element_id`` and press ``key`` on the keyboard (a real key event, as a reader's)."""
    codes = {"ArrowRight": 39, "ArrowDown": 40, "Home": 36}
    browser.evaluate(session, f"document.getElementById({json.dumps(element_id)}).focus(), 1")
    for kind in ("keyDown", "keyUp"):
        browser.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                "windowsVirtualKeyCode": codes[key]}, session=session)


def figure_faults(shown: dict, spec: dict) -> list[str]:
    """How a figure on the page differs from the recorded frame of the setting its controls show."""
    key = "|".join(c["value"] for c in shown["controls"])
    frame = spec["frames"].get(key)
    if frame is None:
        return [f"{shown['id']}: no recorded frame for the controls' setting {key}"]
    faults = []
    if shown["key"] != key:
        faults.append(f"{shown['id']}: draws {shown['key']} while the controls say {key}")
    if shown["caption"] != frame["title"]:
        faults.append(f"{shown['id']} at {key}: caption {shown['caption']!r}, recorded {frame['title']!r}")
    recorded = [[k, json.dumps(v) if v is None else str(v), text] for k, _, v, text in frame["readout"]]
    page = [[k, "null" if v in ("null", "") else v, text] for k, v, text in shown["readout"]]
    for (k, v, text), (pk, pv, ptext) in zip(recorded, page):
        exact = pv == v or (v != "null" and pv != "null" and float(pv) == float(v))
        if k != pk or not exact or text != ptext:
            faults.append(f"{shown['id']} at {key}: {pk} = {pv} ({ptext!r}) on the page, recorded {v} ({text!r})")
    if len(recorded) != len(page):
        faults.append(f"{shown['id']} at {key}: {len(page)} numbers shown, {len(recorded)} recorded")
    want = [sum(len(p["rects"]) for p in frame["panels"]), sum(len(p["lines"]) for p in frame["panels"]),
            sum(len(p["dots"]) for p in frame["panels"])]
    if shown["drawn"] != want:
        faults.append(f"{shown['id']} at {key}: draws {shown['drawn']} boxes/lines/dots, the frame has {want}")
    return faults


def move_every_control(browser: bk.Browser, url: str, recorded: dict[str, dict], on_frame=None) -> tuple[list[str], int]:
    """Open ``url``; for every figure, check it at its defaults, then move each control with the
    keyboard through every value and back to its first (Home), checking the figure against the
    recorded frame each time (`figure_faults`); ``on_frame(figure id, setting)`` may return more
    faults. Returns (faults, frames checked)."""
    target, session, _ = browser.open(url, timeout=120)
    faults, checked = [], 0

    def state(fid):
        return next(f for f in json.loads(browser.evaluate(session, FIGURE_STATE)) if f["id"] == fid)

    def check(fid):
        nonlocal checked
        shown, spec = state(fid), recorded[fid]
        found = figure_faults(shown, spec)
        if on_frame is not None and not found:
            setting = {c["name"]: c["labels"][int(x["value"])] for c, x in zip(spec["controls"], shown["controls"])}
            found += on_frame(fid, setting, spec["frames"][shown["key"]])
        checked += 1
        return shown, found

    try:
        shown_ids = [f["id"] for f in json.loads(browser.evaluate(session, FIGURE_STATE))]
        faults += [f"{fid}: recorded in the notebook, not on the page" for fid in set(recorded) - set(shown_ids)]
        for fid in [f for f in shown_ids if f in recorded]:
            shown, found = check(fid)
            faults += found
            for i, control in enumerate(shown["controls"]):
                spec_c = recorded[fid]["controls"][i]
                if not control["label"].strip():
                    faults.append(f"{fid}: control {control['id']} has no label")
                if control["value"] != str(spec_c["default"]):
                    faults.append(f"{fid}: {control['id']} opens at {control['value']}, its default is {spec_c['default']}")
                forward = "ArrowDown" if control["tag"] == "select" else "ArrowRight"
                for _ in range(len(spec_c["labels"]) - 1 - spec_c["default"]):
                    before = state(fid)["controls"][i]["value"]
                    press(browser, session, control["id"], forward)
                    now, found = check(fid)
                    faults += found
                    if now["controls"][i]["value"] == before:
                        faults.append(f"{fid}: {forward} does not move {control['id']}")
                        break
                press(browser, session, control["id"], "Home")
                now, found = check(fid)
                faults += found
                if now["controls"][i]["value"] != "0":
                    faults.append(f"{fid}: Home does not take {control['id']} to its first value")
        return faults, checked
    finally:
        browser.send("Target.closeTarget", {"targetId": target})


def page_bytes(html: Path) -> int:
    """A page's HTML and the figures it loads (``_images``: its own), in bytes."""
    text = html.read_text(encoding="utf-8", errors="replace")
    images = {html.parent / src for src in re.findall(r'<img[^>]+src="(_images/[^"]+)"', text)}
    return html.stat().st_size + sum(p.stat().st_size for p in images if p.exists())


def bubble_answer(setting: dict) -> float:
    """Chapter 01's GPipe step at ``setting``, asked of the library here (not read from the page)."""
    import devplace_lite as dl
    from devplace_lite.cost import chain_order
    from devplace_lite.schedules import timeline

    g = dl.generators.skip_chain(30, seed=7)
    cluster = dl.Cluster(accelerators=int(setting["p"]))
    split = dl.partition(g, cluster, "time", certify=False)
    times = [split.check().loads[d] for d in chain_order(g, cluster, split.assignment)]
    return timeline.makespan(timeline.gpipe(times, int(setting["m"]), backward=[2 * t for t in times]))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(INTERACTIVE))
def test_interactive_figures_move(book, browser, name):
    """Every interactive figure, opened in Chromium with the network off: its controls are
    labelled and move with the keyboard, and at every setting they reach the figure shows the
    library's recorded answer (the readout's exact values, caption and the frame's boxes, lines
    and dots); chapter 01's step is asked of the library again here. The page weighs under 2 MB."""
    assert book.errors[name] is None, f"{name} failed to execute:\n{book.errors[name]}"
    recorded = recorded_figures(book.notebooks / f"{name}.ipynb")
    assert INTERACTIVE[name] <= set(recorded), f"{name}: figures {INTERACTIVE[name] - set(recorded)} missing"
    html = book.html / f"{name}.html"
    assert page_bytes(html) < PAGE_BYTES, f"{name}: {page_bytes(html)} bytes"

    def library(fid, setting, frame):
        if fid != "fig-01-bubble":
            return []
        step = next(v for k, _, v, _ in frame["readout"] if k == "step")
        answer = bubble_answer(setting)
        return [] if abs(step - answer) <= 1e-9 * answer else [f"{fid} at {setting}: {step} shown, the library says {answer}"]

    faults, checked = move_every_control(browser, html.as_uri(), recorded, library)
    assert not faults, f"{name}: " + "; ".join(faults[:8])
    assert checked > 3 * len(recorded)


def test_figure_check_catches_a_wrong_figure(browser, tmp_path):
    """The figure check can fail: a page whose frames differ from the recorded ones (a value, a
    caption, a box), and a control without a label, are each caught."""
    from devplace_course.interactive import Control, Figure, panel, readout

    fig = Figure("fig-test", [Control("m", "micro-batches", [1, 2, 3], default=2)])
    for m in (1, 2, 3):
        fig.add({"m": m}, f"{m} micro-batches", [panel([0, 3], [0, 1], rects=[[0, 0, m, 1, "#8fb8de", "F"]] * m)],
                [readout("step", "step (ms)", m * 1.5, f"{m * 1.5:.1f}")])
    recorded = {"fig-test": fig.spec()}
    good = tmp_path / "good.html"
    good.write_text(f"<html><body><main>{fig.html()}</main></body></html>")
    faults, checked = move_every_control(browser, good.as_uri(), recorded)
    assert faults == [] and checked == 3, faults
    wrong = json.loads(json.dumps(fig.spec()))
    wrong["frames"]["2"]["readout"][0][2] = 4.0                  # the page shows 4.0 where 4.5 was computed
    wrong["frames"]["0"]["title"] = "something else"
    wrong["frames"]["1"]["panels"][0]["rects"].pop()
    bad = tmp_path / "bad.html"
    page = fig.html().replace(json.dumps(fig.spec(), separators=(",", ":")), json.dumps(wrong, separators=(",", ":")))
    bad.write_text(f"<html><body><main>{page.replace('label.htmlFor = id;', '')}</main></body></html>")
    faults, _ = move_every_control(browser, bad.as_uri(), recorded)
    text = " | ".join(faults)
    assert "step = 4 ('4.5')" in text and "caption 'something else'" in text and "boxes/lines/dots" in text, text
    assert "has no label" in text, text


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
def test_pdf_holds_every_chapter_with_figures_and_math(book):
    """`make pdf` in the same clone (FAST): the single-page HTML printed by Chromium, every
    chapter in it, every figure and formula, nothing wider than the page and no line of a
    cell's code wrapped (measured with print styles at the page's printable width)."""
    install_chromium()
    r = book_command(book.checkout, "pdf")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    m = re.search(r"devplace_lite\.pdf written: (\d+) headings, (\d+) figures, (\d+) formulas typeset, "
                  r"nothing wider than the page, no code line wrapped", r.stdout)
    assert m, out[-2000:]
    headings, figures, formulas = map(int, m.groups())
    single = book.checkout / "build" / "book-singlehtml" / "_build" / "singlehtml" / f"{toc_files()[0]}.html"
    html = single.read_text(encoding="utf-8")
    for name in NOTEBOOK_PAGES[1:]:   # the preface opens the book; every chapter's title follows
        assert re.search(rf"<h[12][^>]*>{name[:2]} ", html), f"{name} is not in the PDF"
    expected = sum(visible_images(book.notebooks / f"{n}.ipynb") for n in NOTEBOOK_PAGES)
    assert figures >= expected, f"{expected} figures in the chapters, {figures} in the PDF"
    assert formulas > 300 and headings >= len(NOTEBOOK_PAGES), (formulas, headings)
    pdf = book.checkout / "build" / "devplace_lite.pdf"
    data = pdf.read_bytes()
    pages = len(re.findall(rb"/Type\s*/Page\b", data))
    assert data.startswith(b"%PDF") and pages > 50, f"{pages} pages"
    assert not [m for m in machine_paths(book) if m.encode() in data]
    shutil.copy2(pdf, ROOT / "build" / "book-test.pdf")


def test_pdf_check_catches_what_is_wider_than_the_page(tmp_path):
    """print_pdf measures the page as printed: a table, a formula box and a code block wider than
    the printable width are each named."""
    binary = install_chromium()
    (tmp_path / "wide.html").write_text(
        "<html><body><main><article><h1>T</h1>"
        "<table><tr>" + "<td>column_with_a_long_name</td>" * 12 + "</tr></table>"
        "<div class='math' style='white-space:nowrap'>" + "a + b + c + d + " * 30 + "</div>"
        "<div class='highlight'><pre style='white-space:pre'>" + "x = 1; " * 60 + "</pre></div>"
        "<p>fits</p></article></main></body></html>")
    seen = bk.print_pdf(tmp_path / "wide.html", tmp_path / "wide.pdf", binary)
    text = " | ".join(seen["overflow"])
    assert text.count("px in") == 3 and "table" in text and "div.math" in text and "pre" in text, text
    assert seen["wrapped"] == []
    # a cell's code line longer than its box holds is wrapped, not wider: named apart, with its length
    line = "x = " + "1 + " * 30 + "1"
    (tmp_path / "wraps.html").write_text(
        "<html><body><main><article><section id='ch'><h1>T</h1><p>short</p><div class='cell_input'>"
        f"<pre style='white-space:pre-wrap;width:300px;padding:5px'>x = 1\n{line}</pre></div>"
        "</section></article></main></body></html>")
    seen = bk.print_pdf(tmp_path / "wraps.html", tmp_path / "wraps.pdf", binary)
    assert seen["overflow"] == [] and len(seen["wrapped"]) == 1, seen
    assert seen["wrapped"][0].startswith(f"#ch: {len(line)} characters in "), seen["wrapped"]


def test_publishing_workflow_serves_the_student_edition():
    """The public pages are the student edition (no solutions, no rubrics); its Colab and Binder
    links point at gh-pages/notebooks/NAME.ipynb, so the workflow puts the student edition's
    executed notebooks there, from a tag, with the repository stamped into their install cell.
    The instructor edition (HTML, PDF, notebooks) is kept as a build artefact, not published."""
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
    for needed in ("make notebooks", "make book", "make pdf", "make student-book",
                   "cp -r build/book-student/_build/html/. site/", "cp build/executed/full/student/*.ipynb site/notebooks/",
                   "cp build/devplace_lite-student.pdf site/", "gh-pages"):
        assert needed in script, f"the workflow does not {needed!r}"
    site = [ln for ln in script.splitlines() if "site/" in ln]
    assert not [ln for ln in site if "build/book/" in ln or "build/devplace_lite.pdf" in ln
                or "executed/full/*.ipynb" in ln], f"the instructor edition goes to the public pages: {site}"
    uploads = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    kept = " ".join(str(u.get("with", {}).get("path", "")) for u in uploads)
    for needed in ("build/book/_build/html", "build/devplace_lite.pdf", "build/executed/full/*.ipynb"):
        assert needed in kept, f"the instructor edition's {needed} is not kept as an artefact"


def test_page_check_catches_broken_pages(browser, tmp_path):
    """The checks above can fail: a broken image, an error block, a raw pipe table, raw TeX, a
    formula set as code, an object's repr as output, a code block wider than its column and an
    asset from another host are each caught."""
    import base64

    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    (tmp_path / "ok.png").write_bytes(png)
    (tmp_path / "page.html").write_text(
        "<html><body><main style='width:400px'><h1>T</h1><img src='ok.png'><img src='missing.png'>"
        "<div class='cell_output'><div class='output traceback'>ZeroDivisionError</div></div>"
        "<div class='cell_output'><div class='output stderr'>FutureWarning: deprecated</div></div>"
        "<p>| a | b |<br>| --- | ---: |<br>| x | 1 |</p><p>inline \\(G = (V, E)\\) left as source</p>"
        "<p>the bound <code>T_chain &gt;= sum p / k</code></p>"
        "<div class='cell_output'><div class='output text_plain'><pre>&lt;IPython.core.display.Markdown object&gt;</pre></div></div>"
        "<div class='cell_output'><div class='output text_plain'><pre>Result(method='exact', objective=0.5)</pre></div></div>"
        "<div class='highlight'><pre style='white-space:pre;overflow:auto'>" + "x = 1; " * 80 + "</pre></div>"
        "<div class='cell_output'><div class='text_html' style='overflow-x:auto'><table><tr>"
        + "<td>a_long_column_name</td>" * 12 + "</tr></table></div></div>"
        "<img src='http://example.invalid/logo.png'></main></body></html>")
    info = browser.inspect((tmp_path / "page.html").as_uri(), PAGE_SCRIPT)
    sizes = sorted((i["src"], i["width"] > 0) for i in info["images"])
    assert sizes == [("http://example.invalid/logo.png", False), ("missing.png", False), ("ok.png", True)]
    assert info["errors"] == 1 and info["h1"] == ["T"]
    found = " | ".join(problems(info))
    for what in ("error output", "warning box", "raw pipe table", "TeX source", "formulas set as code", "wider than its column",
                 "another host", "object's repr"):
        assert what in found, f"not caught: {what} ({found})"
    assert info["reprs"] == ["<IPython.core.display.Markdown object>", "Result(method='exact', objective=0.5)"], info["reprs"]
    assert any(w.startswith("pre") for w in info["wide"]) and any(w.startswith("table") for w in info["wide"]), info["wide"]
