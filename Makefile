# The two commands of the README: `make demo` (the main job) and `make test` (the fast test suite).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test

# (re)install when pyproject.toml changes; creates the virtual environment if missing
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python -m inference fit pines --method nuts

# one pytest worker per core (at most 4), whole files per worker so each keeps its compilation caches
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile
