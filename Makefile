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

.PHONY: demo test test-slurm rehearse readme docs bench-preprocess gpu-check study-prepare study-gpu study-collect clean

# The exact versions of constraints.txt (pyproject.toml states only ranges).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,slurm,tensorboard]'
	touch $@

# One thread per training and decoding job: two small models training side by side get 1.17x the throughput of one
# job on two threads (measured on the 2-core CI machine), and a 2-thread decode would wait for both cores; on bigger
# machines more demo runs go in parallel.
demo: $(VENV)/.installed
	snakemake --cores all --configfile config/demo.yaml --set-threads train=1 translate=1

test: $(VENV)/.installed
	python -m pytest -q -m "not slurm"

# The workflow through a real one-node SLURM cluster started here (root, Debian: apt installs slurm, munge,
# MariaDB); the daemons this target started are stopped afterwards, by PID, whatever the outcome (a failed start too).
test-slurm: $(VENV)/.installed
	bash scripts/slurm-up.sh && LWNMT_REQUIRE_SLURM=1 python -m pytest -q -m slurm; \
		status=$$?; bash scripts/slurm-down.sh; exit $$status

# Every experiment of every table and figure of config.yaml, end to end through the real rules, at toy size on
# stand-in data (no BLEU meaning): rehearsal/summary.md lists the jobs per rule beside the full config's dry run and
# every failure with its row. Needs the data mirror.
rehearse: $(VENV)/.installed
	python -m layerwise_nmt rehearse --dir rehearsal

# After `make demo`: the README's results section from the demo's own table and figures.
readme: $(VENV)/.installed
	python -m layerwise_nmt readme --table results/tables/demo/T1.md \
		--figure results/figures/demo/buckets.png results/figures/demo/attention.png

# The generated blocks of README.md and docs/*.md (plan, parameter counts, figure kinds) from config.yaml; after any
# change to the config, plan or models (tests/test_docs.py fails while one is stale).
docs: $(VENV)/.installed
	python -m layerwise_nmt docs

bench-preprocess: $(VENV)/.installed
	python benchmarks/preprocess.py

# On a GPU machine (no venv needed: the device machines have PyTorch): the CUDA path checked and measured, written
# to benchmarks/results/gpu.json; without CUDA it says so and exits 0.
gpu-check:
	python3 benchmarks/gpu_check.py

# The converged study (config/study.yaml) on a GPU machine without our packages or internet: prepare here, run
# `make study-gpu` there until it prints "study: done", then `make study-collect DIR=<its $$OUT>` here.
study-prepare: $(VENV)/.installed
	bash scripts/study_gpu.sh prepare

study-gpu:
	GPU_CHECK=$${GPU_CHECK:-1} bash scripts/study_gpu.sh device

study-collect: $(VENV)/.installed
	bash scripts/study_gpu.sh collect $(DIR)

clean:
	rm -rf results rehearsal .snakemake
