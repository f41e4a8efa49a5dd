# The two commands a newcomer needs are `make book` and `make test`; both create .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PIP    := $(BIN)/python -m pip
CHAPTERS  := $(sort $(wildcard chapters/[0-9][0-9]_*.md))
NOTEBOOKS := $(patsubst chapters/%.md,build/notebooks/%.ipynb,$(CHAPTERS))
JOBS   ?= 2

.PHONY: install titan test test-unit test-chapters book book-fast notebooks pdf reference lab data bench student student-book test-student test-book clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and exactly pinned: a CPU build where one is offered, never a CUDA download by accident
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[all]"
	touch $(STAMP)

# The compiled kernels, ahead of time for this CPU (devplace_lite/compiled.py): a command then
# never imports numba. Without a C compiler this prints a note and the kernels use numba's JIT.
AOT := $(VENV)/.aot-stamp
$(AOT): $(STAMP) devplace_lite/compiled.py devplace_lite/throughput/dp.py devplace_lite/throughput/slicing.py devplace_lite/multidim/_kernels.py
	$(BIN)/python -m devplace_lite.compiled
	touch $@

install: $(STAMP) $(AOT)

# torchtitan (the extra titan, with the triton it imports): the tests hand it a plan. Not in `all`,
# so that `make book` on a laptop leaves its few hundred MB out.
TITAN := $(VENV)/.titan-stamp
$(TITAN): $(STAMP)
	$(PIP) install -q -c constraints.txt -e ".[titan]"
	touch $@

titan: $(TITAN)

build/notebooks/%.ipynb: chapters/%.md $(STAMP)
	@mkdir -p build/notebooks
	$(BIN)/jupytext --quiet --to ipynb --output $@ $<

# Unit, property, CLI tests and every chapter (FAST mode), two workers.
test: $(STAMP) $(AOT) $(TITAN) $(NOTEBOOKS)
	DEVPLACE_FAST=1 MPLBACKEND=Agg $(BIN)/python -m pytest -n $(JOBS) --dist loadfile tests $(NOTEBOOKS) --nbval-lax --nbval-current-env -p no:cacheprovider

test-unit: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) tests

test-chapters: $(STAMP) $(NOTEBOOKS)
	DEVPLACE_FAST=1 MPLBACKEND=Agg $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env $(NOTEBOOKS)

# Execute every chapter (full size, two at a time) into build/executed/full, then build the HTML
# book from those notebooks into build/book/_build/html (warnings fail the build).
EXECUTED := build/executed/full/.done
$(EXECUTED): $(CHAPTERS) $(STAMP)
	$(BIN)/python -m devplace_course.book notebooks
	touch $@

book: $(EXECUTED)
	$(BIN)/python -m devplace_course.book html

# The same book with every chapter run in FAST mode (DEVPLACE_FAST=1, as make test runs them), into
# build/executed/fast and build/book/_build/html: a quick look at every page.
book-fast: $(STAMP)
	$(BIN)/python -m devplace_course.book notebooks --fast
	$(BIN)/python -m devplace_course.book html --fast

# The executed .ipynb of every chapter and of the student edition (build/executed/full and
# build/executed/full/student), as Colab and Binder open them.
notebooks: $(STAMP)
	$(BIN)/python -m devplace_course.book notebooks --student
	touch $(EXECUTED) $(STUDENT_EXECUTED)

# The whole book as one PDF (build/devplace_lite.pdf): the single-page HTML printed by Chromium
# (found on the PATH, or Debian's chromium package installed when running as root; otherwise it
# stops with one line naming the package). Fails when anything is wider than the page.
pdf: $(EXECUTED)
	$(BIN)/python -m devplace_course.book pdf

# The course edition: the book without solutions and rubrics (checks kept, exercises as stubs),
# executed full size, as HTML (build/book-student/_build/html) and PDF (build/devplace_lite-student.pdf).
STUDENT_EXECUTED := build/executed/full/student/.done
$(STUDENT_EXECUTED): $(CHAPTERS) $(STAMP) devplace_course/student.py
	$(BIN)/python -m devplace_course.book notebooks --edition student
	touch $@

student-book: $(STUDENT_EXECUTED)
	$(BIN)/python -m devplace_course.book html --edition student
	$(BIN)/python -m devplace_course.book pdf --edition student

# The authors' published workloads and Piper's inputs (MIT) from their public repositories into
# build/reference; then export DEVPLACE_REFERENCE=$(CURDIR)/build/reference/msr-dnn-partitioning
# and DEVPLACE_PIPER=$(CURDIR)/build/reference/msr-piper
reference: $(STAMP)
	$(BIN)/python -m devplace_course.reference build/reference/msr-dnn-partitioning
	$(BIN)/python -m devplace_course.reference --piper build/reference/msr-piper

# The student edition: solutions replaced by stubs, checks kept (build/student/chapters and /notebooks).
student: $(STAMP)
	$(BIN)/python -m devplace_course.student chapters build/student

# Execute the student edition (FAST): unattempted exercises report "not attempted", nothing breaks.
test-student: student
	DEVPLACE_FAST=1 MPLBACKEND=Agg $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env build/student/notebooks -p no:cacheprovider

# The rendered book, built FAST as `make book` builds it in a clone of a local path (a temp copy of
# this checkout), opened in headless Chromium (installed if missing), and its PDF.
test-book: $(STAMP)
	$(BIN)/python -m pytest tests/test_book.py -p no:cacheprovider

lab: $(STAMP)
	$(BIN)/jupyter lab chapters

# Workshops and courses: JupyterLab on the student edition (solutions and answer keys out, checks kept).
.PHONY: lab-student
lab-student: student
	$(BIN)/jupyter lab build/student/chapters

# Regenerate data/graphs/ byte for byte from the project's own generators and model zoo.
data: $(STAMP)
	$(BIN)/python -m devplace_course.data_build data/graphs

bench: $(STAMP) $(AOT)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf build chapters/_build
