# Two commands on a fresh machine:  `make demo` (set up + run the CPU-sized workflow) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(abspath $(VENV)/bin)

# A data mirror beside the checkout (CI, air-gapped clusters) is used when present; otherwise rules download
# from the official URLs. Override with `make demo LWNMT_DATA_MIRROR=/path` (or unset it to force downloads).
MIRROR := $(firstword $(wildcard ../shared/data-mirror))
LWNMT_DATA_MIRROR ?= $(if $(MIRROR),$(abspath $(MIRROR)))
export LWNMT_DATA_MIRROR
export PATH := $(BIN):$(PATH)

.PHONY: demo test bench-preprocess clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# One thread per training job: two small models training side by side get 1.17x the throughput of one job on
# two threads (measured on the 2-core CI machine); on bigger machines more demo runs go in parallel.
demo: $(VENV)/.installed
	snakemake --cores all --configfile config/demo.yaml --set-threads train=1

test: $(VENV)/.installed
	python -m pytest -q

bench-preprocess: $(VENV)/.installed
	python benchmarks/preprocess.py

clean:
	rm -rf results .snakemake
