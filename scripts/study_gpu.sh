#!/usr/bin/env bash
# The study (config/study.yaml) and `make gpu-check` on a GPU machine that has PyTorch but nothing else of ours and
# no internet (this workplace's device machines), in three steps; docs/usage.md ("The converged study on a GPU").
#
#   scripts/study_gpu.sh prepare   # here (CPU, internet to PyPI): wheels → .whl/, data → .study/data.tar.gz
#   scripts/study_gpu.sh device    # there, repeated until it prints "study: done" (each call ≤ STUDY_SECONDS);
#                                  # carry .whl and .study; results come back under $OUT (≤ 8 files)
#   scripts/study_gpu.sh collect DIR   # here: unpack DIR/study-results.tar.gz into results/, build table + figures
#
# Settings (environment): STUDY_CONFIG (overlay, default config/study.yaml; more overlays after it in
# STUDY_EXTRA), STUDY_JOBS (trainings at once on the one GPU, default 3: small models leave most of an H100 idle;
# measure with STUDY_JOBS=1 vs 3 and compare updates/s in each run's metrics.csv), STUDY_SECONDS (Snakemake's time
# per call, default 480, inside the device's 10-minute limit; a training stopped by it checkpoints on SIGTERM and
# the next call resumes from checkpoint_last.pt), GPU_CHECK=1 (run benchmarks/gpu_check.py first; its gpu.json comes
# back in $OUT), STUDY_WHEELS=0 (prepare: skip the wheels, e.g. on a machine that has snakemake). On your own GPU box
# none of this is needed: `snakemake --cores all --configfile config/study.yaml`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CONFIG=$(realpath "${STUDY_CONFIG:-config/study.yaml}")
EXTRA=$(for f in ${STUDY_EXTRA:-}; do realpath "$f"; done)
cd "${STUDY_WORKDIR:-$ROOT}"  # where results/ is (the tests use a scratch folder)
SNAKE=(python -m snakemake -s "$ROOT/Snakefile")  # then targets, then CONFIGS: --configfile and --quiet take lists
CONFIGS=(--configfile "$CONFIG" $EXTRA)
RESULTS_TGZ=study-results.tar.gz
CARRY=${STUDY_CARRY:-$ROOT/.study}  # what travels to the device besides .whl: the prepared data
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

# snakemake 9.27.1, sacremoses and subword-nmt with what they need beyond the device image's packages (pip resolves
# against the image's own site-packages there, so the wheels of packages it already has are ignored)
WHEELS="snakemake==9.27.1 sacremoses==0.2.0 subword-nmt==0.3.8"

prepare() {
    if [ "${STUDY_WHEELS:-1}" = 1 ] && [ ! -f .whl/.complete ]; then
        python -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any -d .whl $WHEELS
        touch .whl/.complete
    fi
    "${SNAKE[@]}" "${CONFIGS[@]}" --cores all --until binarize --quiet rules
    mkdir -p "$CARRY"
    tar -czf "$CARRY/data.tar.gz" results/*/data
    echo "study: prepared .study/data.tar.gz ($(du -h "$CARRY/data.tar.gz" | cut -f1)); now 'scripts/study_gpu.sh device' there"
}

device() {
    local out=${OUT:-study-out}
    mkdir -p "$out"
    if [ -d "$ROOT/.whl" ] && ! python -c "import snakemake" 2>/dev/null; then  # once per fresh machine
        python3 -m venv --system-site-packages /tmp/study-venv
        /tmp/study-venv/bin/pip install --quiet --no-index --find-links "$ROOT/.whl" $WHEELS
    fi
    [ -x /tmp/study-venv/bin/python ] && export PATH=/tmp/study-venv/bin:$PATH  # `python` for the rules
    [ -d results ] || tar -xzf "$CARRY/data.tar.gz"
    local start=$SECONDS status=0
    if [ "${GPU_CHECK:-0}" = 1 ] && [ ! -f results/.gpu-check.done ]; then  # once per machine, same budget
        python "$ROOT/benchmarks/gpu_check.py" --json "$out/gpu.json" || echo "gpu-check: some checks failed (gpu.json)"
        touch results/.gpu-check.done
    fi
    local left=$(( ${STUDY_SECONDS:-480} - (SECONDS - start) ))
    if [ "$left" -lt 60 ]; then pack "$out"; echo "study: not started (gpu-check took the budget); call again"; return; fi
    "${SNAKE[@]}" "${CONFIGS[@]}" --unlock >/dev/null 2>&1 || true
    timeout -s TERM -k 60 "$left" "${SNAKE[@]}" "${CONFIGS[@]}" --cores all --rerun-incomplete --keep-going \
        --config gpus_per_job=0 --set-threads train=1 --resources "train_slots=${STUDY_JOBS:-3}" \
        --set-resources "train:train_slots=1" || status=$?
    pack "$out"
    if [ "$status" = 0 ]; then echo "study: done"; else echo "study: not finished (exit $status); call again"; fi
}

# what the table and figures read (scores, hypotheses, metrics, training.json, logs, and the test/valid texts that
# the bootstrap and the length buckets compare against), small: one archive
pack() {
    { find results -path '*/data' -prune -o -type f \( -name '*.json' -o -name '*.txt' -o -name '*.csv' \
        -o -name '*.log' -o -name '*.tsv' -o -name '*.bpe' -o -name '*.detok' \) -print  # no *.pt: models stay
      find results -path '*/data/text/*' -type f \( -name 'test.*' -o -name 'valid.*' \) -print
    } | tar -czf "$1/$RESULTS_TGZ" -T -
}

collect() {
    tar -xzf "$1/$RESULTS_TGZ"
    if [ -f "$1/gpu.json" ]; then cp "$1/gpu.json" "$ROOT/benchmarks/results/gpu.json"; fi
    # only the report's rules: the scores came from the GPU, whose models stayed there
    "${SNAKE[@]}" tables "${CONFIGS[@]}" --config models_elsewhere=True --cores all \
        --allowed-rules table figure summary tables --quiet rules
}

case "${1:-}" in
    prepare) prepare ;;
    device) device ;;
    collect) collect "$(realpath "${2:?collect needs the folder holding $RESULTS_TGZ}")" ;;
    *) echo "usage: $0 prepare | device | collect DIR" >&2; exit 2 ;;
esac
