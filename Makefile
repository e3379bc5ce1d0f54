# The README's commands: `make demo` (the main job), `make test` (the fast test suite), `make docs` (the site).
# Each creates .venv if missing and (re)installs what it needs when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SPHINX := $(PY) -m sphinx -n -W --keep-going -b html docs docs/_build/html

.PHONY: demo test test-slow docs docs-fast docs-figures wheel-check lint

$(PY):
	$(PYTHON) -m venv $(VENV)

# the demo needs the core install only (no test, Dask or NUFFT extras)
$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PY) -m pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test]'
	touch $@

$(VENV)/.installed-docs: pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[docs]'
	touch $@

demo: $(VENV)/.installed-demo
	$(PY) -m inference fit pines --method nuts

# one pytest worker per core (at most 4), whole files per worker so each keeps its compilation caches;
# the 15 slowest tests are printed at the end, so a test that grows the suite's time is seen in every run
test: $(VENV)/.installed-test
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile --durations=15

# the slow tier (tests marked `slow`: long runs to convergence, large sizes, the quick benchmarks, the
# own-model notebook), run with the benchmarks rather than in CI
test-slow: $(VENV)/.installed-test
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile -m slow

# the site with every notebook executed at the tests' reduced size (PPL_SPARSEGP_DOCS_FULL=1: full size),
# into docs/_build/html/index.html; warnings are errors
docs: $(VENV)/.installed-docs
	$(SPHINX)

# the same without executing the notebooks (what CI builds): a broken reference or docstring still fails;
# the pages' figures are the committed fallbacks of docs/_figures
docs-fast: $(VENV)/.installed-docs
	PPL_SPARSEGP_DOCS_EXECUTE=0 $(SPHINX)

# the executed build, then its figures (the pines map, the guides' plots) as the committed fallbacks
docs-figures: docs
	$(PY) -c "import sys; sys.path.insert(0, 'docs/_ext'); import pagefigures; pagefigures.save_fallbacks()"

# ruff with the configuration of pyproject.toml ([tool.ruff]: NumPyro's E, F, I, W rules at 120 columns)
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .

# build the wheel and sdist, install the wheel into a fresh venv outside the repository, import and fit there
wheel-check: $(VENV)/.installed-test
	PYTHON=$(PY) .ci/wheel_check
