# The verbs of the book. `make book` and `make test` bootstrap .venv on their own.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# What changes executed outputs without changing a notebook's code cells: the package and
# the pins. Jupyter Book's cache keys on code cells only, so a change here clears _build.
INPUTS_HASH = $(shell cat requirements.txt pyproject.toml $$(find src -name '*.py' | LC_ALL=C sort) | sha256sum | cut -c1-16)
BOOK_FLAGS := --warningiserror --nitpick --keep-going

# The kernel inherits these: fixed hash seed (set ordering) and the venv's kernelspec first.
export PYTHONHASHSEED := 0
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
export MPLBACKEND := agg

.PHONY: book test notebooks serve lab bench clean
NB ?= book/*.ipynb
.DEFAULT_GOAL := book

$(STAMP): requirements.txt pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: $(STAMP)
	@if [ "$$(cat _build/.inputs-hash 2>/dev/null)" != "$(INPUTS_HASH)" ]; then \
		echo "src/ or the pins changed: building from scratch"; rm -rf _build; fi
	$(BIN)/jupyter-book build . $(BOOK_FLAGS)
	@echo "$(INPUTS_HASH)" > _build/.inputs-hash

test: $(STAMP)
	$(BIN)/python -m pytest

notebooks: $(STAMP)
	$(BIN)/python tools/run_notebooks.py $(NB)

serve: $(STAMP)
	@test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory _build/html 8000

# JupyterLab stays out of requirements.txt: it is for people, not for the build.
lab: $(STAMP)
	@test -x $(BIN)/jupyter-lab || $(BIN)/python -m pip install --quiet --disable-pip-version-check jupyterlab
	$(BIN)/jupyter-lab book

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf _build
