# `make demo` and `make test` set themselves up in .venv on a fresh machine (Python >= 3.11 + pip).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,mkl,bench]'
	touch $(STAMP)

# W1 Tree-LSTM on built-in synthetic SST trees, eager vs batched: the summary table (under a minute once set up)
demo: $(STAMP)
	$(PY) -m hybridbatch.bench W1 --instances 256 --warmup 64 --eager-instances 64 --repeats 1

# pytest exits 5 when it collects no test, so an empty suite fails here.
test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_schedule.py

clean:
	rm -rf $(VENV) build *.egg-info
