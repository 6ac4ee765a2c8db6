# Two commands on a fresh machine:  `make demo` (set up + run the CPU-sized workflow) and `make test`.
PYTHON ?= python3
VENV   := .venv

# A local data mirror (air-gapped clusters, CI) is read when LWNMT_DATA_MIRROR names one, from the environment or
# `make demo LWNMT_DATA_MIRROR=/path`; otherwise the rules download from the official URLs.
export LWNMT_DATA_MIRROR
# The venv's programs first. Make splits words on spaces, so the checkout's own path (a folder named "my lab") is
# never a word of a recipe: recipes reach the venv relatively ($(VENV)/bin/...) or through PATH.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: demo test test-all lint test-slurm rehearse readme docs bench-preprocess gpu-check gpu-first study-run study-check study-budget study-prepare study-shard study-collect study-cpu study-cpu-collect study-cpu6 study-cpu6-collect node-rehearsal clean

# The exact versions of constraints.txt (pyproject.toml states only ranges).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
		-e '.[test,slurm,tensorboard,ctranslate2,lint]'
	touch $@

# One thread per training and decoding job: two small models training side by side get 1.17x the throughput of one
# job on two threads (measured on a 2-core machine), and a 2-thread decode would wait for both cores; on bigger
# machines more demo runs go in parallel.
demo: $(VENV)/.installed
	snakemake --cores all --configfile config/demo.yaml --set-threads train=1 translate=1
	@echo "The demo's table: results/tables/demo/T1.md (also .csv, .html, .tex); its figures:" \
		results/figures/demo/*.png

# The suite in tiers (pyproject.toml's markers): `make test` runs the unit and integration tests, a contributor's
# loop (minutes); `make test-all` every tier this machine can run (system: Snakemake runs, virtualenv builds, the
# rehearsal's pieces, training to a quality threshold), as CI does; `make test-slurm` and `make gpu-check` need
# their machines. On every core (pytest-xdist): each worker's PyTorch computes on one thread (tests/conftest.py),
# so that workers never wait on each other's cores; tests that share a resource (the Snakemake-only venv) take a
# file lock. The 20 slowest tests are listed at the end: where the suite's time goes.
test: $(VENV)/.installed
	python -m pytest -q -m "unit or integration" -n auto --durations=20

test-all: $(VENV)/.installed
	python -m pytest -q -m "not slurm and not gpu" -n auto --durations=20

# The code's form, as pyproject.toml configures it: ruff's lint and format check over every Python file, then mypy
# over the package (tests/test_lint.py runs the same three, so that `make test` fails too when the code drifts).
lint: $(VENV)/.installed
	ruff check .
	ruff format --check .
	mypy

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

# On a rented or borrowed GPU node without internet, for a short allocation (docs/usage.md, "On a GPU node without
# internet"): its python3 has PyTorch but nothing else of ours, so the wheels and the data travel. On the checkout's
# machine: `make study-prepare`; on the node, carrying .whl and .study, with bash and python3 only (no make, no git):
# `bash scripts/study_gpu.sh run` (a minute short of one command's limit: <= 90 s of checks, a probe that sizes the
# run if PROBE_S is set, then the small study's 6 rows x 3 seeds, results rewritten as each run ends), then, in what
# is left, `bash scripts/study_gpu.sh check` (the full gpu-check); back here: `make study-collect DIR="<each
# allocation's returned folder>"`, then commit benchmarks/results/gpu.json and docs/study/. The node's limits are
# yours to give, with no defaults: ALLOCATION_S (seconds in all) and NODE_COMMAND_S (seconds per command), e.g.
# `make study-budget ALLOCATION_S=3600 NODE_COMMAND_S=1800` prints each step's seconds against them.
# On a GPU machine: the correctness checks as tests (tests/test_gpu.py: every family and precision, data-parallel,
# the GPU lock), then the speed rows into benchmarks/results/gpu.json.
gpu-check: $(VENV)/.installed
	python -m pytest -q -m gpu tests/test_gpu.py
	python benchmarks/gpu_check.py --skip-checks

study-run:
	bash scripts/study_gpu.sh run

gpu-first study-check:
	bash scripts/study_gpu.sh check

study-budget:
	bash scripts/study_gpu.sh budget

study-prepare: $(VENV)/.installed
	bash scripts/study_gpu.sh prepare

study-shard:
	bash scripts/study_gpu.sh shard $(SHARD)

study-collect: $(VENV)/.installed
	bash scripts/study_gpu.sh collect $(DIR)

# The small study near convergence on a CPU, at two depths: STUDY=cpu (3+3 layers, config/study_cpu.yaml, the
# default) and STUDY=cpu6 (6+6, config/study_cpu6.yaml; `make study-cpu6`); docs/results.md. One seed's
# runs (SEED=1 also trains the recipe's checks), two trainings at a time with one thread each, then their small text
# files copied into docs/study/$(STUDY)/ and that page, docs/results.md's tables and the figure across depths rewritten
# from every seed there. A task's held-out source sets are translated too where LWNMT_HELDOUT_DIR (or heldout_dir:)
# names their folder. Seeds may run on different machines at different times, each seed on one kind (CPU or GPU);
# commit docs/study/ after each. The targets come first: --set-threads reads every word after it as a rule's
# threads. Rerun after a kill (`snakemake --unlock` first): each training resumes from its last checkpoint, and the
# runs trained already are translated first (--prioritize), so that `lwnmt evidence copy --partial` can commit them
# before the seed's other trainings end. TABLE=T2 runs the seed's rows on the papers' own protocols (T1, the
# default: the earlier recipe's rows); `make study-cpu6 TABLE=T2 SEED=1`.
export LWNMT_HELDOUT_DIR
STUDY ?= cpu
TABLE ?= T1
STUDY_ARGS = --config config.yaml --config config/study_$(STUDY).yaml --table study_$(STUDY)/$(TABLE)
study-cpu: $(VENV)/.installed
	$(if $(SEED),,$(error study-cpu: set SEED, e.g. make study-cpu SEED=1))
	targets=$$(python -m layerwise_nmt evidence targets $(STUDY_ARGS) --seed $(SEED) --out docs/study/$(STUDY)) && \
	trained=$$(python -m layerwise_nmt evidence targets $(STUDY_ARGS) --seed $(SEED) --trained) && \
		snakemake $$targets --cores all --rerun-incomplete --configfile config/study_$(STUDY).yaml \
			--set-threads train=1 translate=1 translate_heldout=1 $${trained:+--prioritize $$trained}
	python -m layerwise_nmt evidence copy $(STUDY_ARGS) --seed $(SEED) --out docs/study/$(STUDY)
	$(MAKE) study-cpu-collect STUDY=$(STUDY)

study-cpu6:
	$(MAKE) study-cpu STUDY=cpu6 TABLE=$(TABLE)

# The bootstrap compares hypotheses against the tokenized test references: prepared if this checkout has none (only
# then: a rerun of the data rules would make every training of a study in progress look out of date).
STUDY_CPU_REF := results/multi30k_deen/data/text/test.de-en.en
# T1: the earlier recipe's rows; T2: the same comparisons on the papers' own protocols (its page is T2.md)
STUDY_TABLES := T1 T2
study-cpu-collect: $(VENV)/.installed
	test -f $(STUDY_CPU_REF) || snakemake $(STUDY_CPU_REF) --cores all --configfile config/study_$(STUDY).yaml
	for table in $(STUDY_TABLES); do \
		python -m layerwise_nmt evidence collect --config config.yaml --config config/study_$(STUDY).yaml \
			--table study_$(STUDY)/$$table --out docs/study/$(STUDY) --ref $(STUDY_CPU_REF) \
			--run-command "make study-$(STUDY) TABLE=$$table SEED=<k>" \
			--collect-command "make study-$(STUDY)-collect" || exit 1; \
	done
	python -m layerwise_nmt evidence depth --study 3+3=docs/study/cpu --study 6+6=docs/study/cpu6 \
		--figure docs/study/depth.png
	python -m layerwise_nmt docs

study-cpu6-collect:
	$(MAKE) study-cpu-collect STUDY=cpu6

# The GPU node's environment rebuilt here (a Python 3.12 venv with only the image's packages at the image's
# versions, scripts/node-image-versions.txt: torch 2.11, ~5 GB; REHEARSAL_PYTHON=host for python3 + torch 2.13),
# the copy that travels and the returned files checked against the node's limits, which you give as for study-budget
# with CARRY_LIMIT_MIB, FILES_BACK, FILE_BACK_MIB, BACK_LIMIT_MIB and BACK_DEPTH (no defaults), and the commands above
# run in it on the CPU at toy size; CI runs it.
node-rehearsal: $(VENV)/.installed
	bash scripts/gpu_node_rehearsal.sh

clean:
	rm -rf results rehearsal .snakemake .node-rehearsal
