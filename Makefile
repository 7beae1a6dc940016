# `make demo` and `make test` set themselves up in .venv on a fresh machine (Python >= 3.11 + pip).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench docs peers clean

# The warm-up after installing (hybridbatch_workloads/bench/warm_up.py): short W1 and CHILDSUM
# runs, in which numba compiles hybridbatch's functions and their fused kernels for this machine
# and the BLAS routes are timed, once (about 30 s, which it says), not in a first minibatch.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,mkl,bench]'
	$(PY) -m hybridbatch_workloads.bench.warm_up
	touch $(STAMP)

# W1 Tree-LSTM on built-in synthetic SST trees, eager vs batched: the summary table (under a minute once set up)
demo: $(STAMP)
	$(PY) -m hybridbatch.bench W1 --instances 256 --warmup 64 --eager-instances 64 --repeats 1

# pytest exits 5 when it collects no test, so an empty suite fails here.
test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_schedule.py

# the documentation site into site/ (mkdocs.yml): the docs extra on top of make's install,
# and --strict, so that any warning (a broken link, a docstring the reference cannot read)
# fails the build
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@

docs: $(DOCS_STAMP)
	$(VENV)/bin/mkdocs build --strict

# the outside peers of benchmarks/peers/ in their own venv (torch is never a dependency of
# hybridbatch); see benchmarks/peers/requirements.txt for which torch build pip takes
PEERS := benchmarks/peers/.venv
$(PEERS)/.installed: benchmarks/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet -r benchmarks/peers/requirements.txt
	touch $@

peers: $(PEERS)/.installed

clean:
	rm -rf $(VENV) $(PEERS) build site *.egg-info
