#!/usr/bin/env bash
# gpu-check and the converged study (config/study.yaml) on a rented or borrowed GPU node that has PyTorch but nothing
# else of ours, no internet and no filesystem shared with this checkout, for a short allocation (defaults: about
# 15 minutes in all, node start included, and 10 minutes per command; a few files of <= 16 MiB come back; the node
# is wiped afterwards). docs/usage.md, "On a GPU node without internet". Every command adds evidence: results are
# written as they happen and packed on exit, however it exits.
#
#   scripts/study_gpu.sh prepare          # on the checkout's machine (CPU, PyPI): wheels → .whl/
#                                         # (scripts/node_wheels.py), Multi30k preprocessed → .study/data.tar.gz
#   scripts/study_gpu.sh first            # on the node, command 1 (<= 8 min): environment, gpu-check (every family
#                                         # in bf16/fp16/TF32/fp32, speed rows, the study throughput probe) → $OUT
#   scripts/study_gpu.sh shard NAME       # on the node, command 2..: one shard of the study, whole inside one command
#   scripts/study_gpu.sh shards           # the shards, in the order allocations should take them
#   scripts/study_gpu.sh collect DIR...   # back on the checkout's machine: merge what came back (any number of
#                                         # allocations) into .study/, gpu.json → benchmarks/results/, docs/study/
#
# Shards (models cannot travel back, so a shard holds a baseline together with the rows warm-started from it):
#   small       all 6 rows × 3 seeds at the demo's model size (config/study_small.yaml), 9 trainings at once:
#               the first allocation that reaches the study yields a whole table
#   seed1..3    transformer_iwslt_de_en size: seed k's baseline, then its three warm-started rows
#   lwc-mlrf    transformer_iwslt_de_en size: LWC and MLRF Dec-SA, 3 seeds each, 6 at once
#
# Settings (environment): OUT (where results go: the folder your node's job sends back; default ./node-out),
# NODE_COMMAND_S (the node's limit per command, default 600: the budgets below keep inside it), STUDY_SECONDS (a
# shard's Snakemake budget, default NODE_COMMAND_S - 100), FIRST_SECONDS (gpu-check's, default NODE_COMMAND_S - 150),
# GPU_CHECK_ARGS (extra gpu_check.py arguments: the rehearsal's --device cpu and toy budgets), STUDY_EXTRA (more
# overlays, after the shard's), STUDY_JOBS (trainings at once; default per shard), STUDY_SITE (where the wheels are
# installed, default /tmp/site), STUDY_PY and STUDY_IMAGE_PACKAGES (prepare: the node's Python and the packages its
# image already has). On a GPU machine with internet and this checkout none of this is needed:
# `snakemake --cores all --configfile config/study.yaml`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
STUDY=$ROOT/.study                       # data.tar.gz (carried) and one Snakemake folder per model size
SITE=${STUDY_SITE:-/tmp/site}
OUT=${OUT:-$ROOT/node-out}
COMMAND_S=${NODE_COMMAND_S:-600}
EXTRA=$(for f in ${STUDY_EXTRA:-}; do realpath "$f"; done)
SHARDS="small seed1 seed2 seed3 lwc-mlrf"
TASK=multi30k_deen

shard_size() { case $1 in small) echo small ;; seed[123]|lwc-mlrf) echo iwslt ;; *) return 1 ;; esac; }
size_configs() {  # the overlays of a model size (prep: the data only), after config.yaml
    echo "$ROOT/config/study.yaml"
    if [ "$1" = small ]; then echo "$ROOT/config/study_small.yaml"; fi
    for f in $EXTRA; do echo "$f"; done
}
shard_targets() {  # Snakemake targets: each run's test score (tables and figures are built at collect)
    local runs
    case $1 in
        small) runs=$(for s in 1 2 3; do for e in transformer lwc mlrf_dec_sa gca_full dou_deep transformer_longer; do
                   echo "study.$e/seed$s"; done; done) ;;
        seed[123]) runs=$(for e in transformer gca_full dou_deep transformer_longer; do echo "study.$e/seed${1#seed}"; done) ;;
        lwc-mlrf) runs=$(for s in 1 2 3; do echo "study.lwc/seed$s study.mlrf_dec_sa/seed$s"; done) ;;
    esac
    for r in $runs; do echo "results/$TASK/$r/test.score.json"; done
}
shard_jobs() { case $1 in small) echo 9 ;; lwc-mlrf) echo 6 ;; *) echo 3 ;; esac; }

snake() {  # snakemake TARGETS... OPTIONS... in a model size's folder; the config files go last (a list option)
    local size=$1; shift
    python3 -m snakemake -s "$ROOT/Snakefile" -d "$STUDY/$size" "$@" \
        --configfile "$ROOT/config.yaml" $(size_configs "$size")
}

prepare() {
    local packages=${STUDY_IMAGE_PACKAGES:-scripts/node-image-packages.txt} key
    # the wheels are for one Python, one image and our pins: made again when any of them changed
    key="python ${STUDY_PY:-3.12} $(cat "$packages" constraints.txt | sha256sum | cut -c1-16)"
    if [ "$(cat .whl/.complete 2>/dev/null)" != "$key" ]; then
        rm -rf .whl
        python scripts/node_wheels.py .whl --python-version "${STUDY_PY:-3.12}" --image-packages "$packages"
        echo "$key" > .whl/.complete
    fi
    mkdir -p "$STUDY/prep"
    snake prep --cores all --until binarize --quiet rules
    tar -czf "$STUDY/data.tar.gz" -C "$STUDY/prep" "results/$TASK/data"
    echo "study: prepared .whl ($(du -sh .whl | cut -f1)) and .study/data.tar.gz ($(du -h "$STUDY/data.tar.gz" | cut -f1));" \
         "carry both: 'scripts/study_gpu.sh first', then 'scripts/study_gpu.sh shard NAME' ($SHARDS)"
}

# The image's python3 is itself a venv: a venv made from it would see the base interpreter's packages (no torch).
# The carried wheels go into a plain folder on PYTHONPATH instead, without a resolver and without touching the image.
setup_env() {
    local wheels
    wheels=$(cat "$ROOT/.whl/.complete" 2>/dev/null || true)
    if [ -n "$wheels" ] && [ "$(cat "$SITE/.installed" 2>/dev/null)" != "$wheels" ]; then  # these wheels, once
        rm -rf "$SITE" && mkdir -p "$SITE"
        python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
            "$ROOT"/.whl/*.whl
        echo "$wheels" > "$SITE/.installed"
    fi
    export PYTHONPATH="$ROOT/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$SITE/bin:$PATH"
    for module in torch yaml snakemake sacremoses subword_nmt jsonschema sacrebleu; do
        python3 -c "import $module" 2>/dev/null || { echo "study: python3 cannot import $module (carry .whl: make study-prepare)"; return 1; }
    done
}

unpack_data() {
    local size=$1
    [ -d "$STUDY/$size/results/$TASK/data" ] && return
    mkdir -p "$STUDY/$size"
    tar -xzf "$STUDY/data.tar.gz" -C "$STUDY/$size"
}

environment() {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi 2>&1 | head -20 || echo "nvidia-smi: not found"
    python3 -c "import sys, torch; print('python', sys.version.split()[0], sys.executable); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
    df -h "$ROOT" /tmp 2>&1
    nproc; free -g 2>/dev/null | head -2 || true
    echo "pip freeze (the image's versions: scripts/node-image-versions.txt pins the rehearsal's to these):"
    python3 -m pip freeze 2>&1 | grep -v '^WARNING' || true
}

first() {
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/first.log") 2>&1
    trap 'echo "first: exit $? at $(date -u +%T)"' EXIT  # gpu.json is already on disk, rewritten after every check
    environment > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
    setup_env
    unpack_data iwslt
    local status=0
    timeout -s TERM -k 20 "${FIRST_SECONDS:-$((COMMAND_S - 150))}" python3 "$ROOT/benchmarks/gpu_check.py" --json "$OUT/gpu.json" \
        --probe "$STUDY/iwslt/results/$TASK/data/bin-joint" ${EXTRA:+--probe-config $EXTRA} ${GPU_CHECK_ARGS:-} \
        || status=$?
    echo "first: gpu_check exit $status; next: scripts/study_gpu.sh shard $(next_shard)"
    return $status
}

next_shard() { echo "${SHARDS%% *}"; }

shard() {
    local name=$1 size status=0 start=$SECONDS
    size=$(shard_size "$name") || { echo "study: unknown shard $name; known: $SHARDS" >&2; exit 2; }
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/shard-$name.log") 2>&1
    trap "pack $name $size" EXIT  # whatever happens, what the shard made comes back
    setup_env
    unpack_data "$size"
    snake "$size" --unlock >/dev/null 2>&1 || true
    # gpus_per_job 0: the small models share the one GPU, no job holds its lock; a training stopped by the budget
    # checkpoints on SIGTERM (its logs and metrics come back; its model cannot)
    export -f snake size_configs; export STUDY ROOT EXTRA
    timeout -s TERM -k 60 "${STUDY_SECONDS:-$((COMMAND_S - 100))}" bash -c 'snake "$@"' snake "$size" $(shard_targets "$name") \
        --cores all --rerun-incomplete --keep-going --config gpus_per_job=0 --set-threads train=1 \
        --resources "train_slots=${STUDY_JOBS:-$(shard_jobs "$name")}" --set-resources train:train_slots=1 \
        || status=$?
    local done=0 total=0
    for t in $(shard_targets "$name"); do total=$((total + 1)); [ -f "$STUDY/$size/$t" ] && done=$((done + 1)); done
    echo "study: shard $name: $done of $total runs scored in $((SECONDS - start)) s (snakemake exit $status)"
    [ "$done" = "$total" ]
}

# what the tables and figures read (scores, hypotheses, metrics, training.json, logs, and the test/valid texts that
# the bootstrap and the length buckets compare against): one small archive per shard, no models
pack() {
    local name=$1 size=$2
    ( cd "$STUDY/$size" 2>/dev/null || exit 0
      { find results -path '*/data' -prune -o -type f \( -name '*.json' -o -name '*.txt' -o -name '*.csv' \
            -o -name '*.log' -o -name '*.tsv' -o -name '*.bpe' -o -name '*.detok' \) -print
        find results -path '*/data/text/*' -type f \( -name 'test.*' -o -name 'valid.*' \) -print
      } | tar -czf "$OUT/shard-$name.tar.gz" -T - )
}

collect() {
    local dir archive name size
    for dir in "$@"; do
        for archive in "$dir"/shard-*.tar.gz; do
            [ -f "$archive" ] || continue
            name=$(basename "$archive" .tar.gz); name=${name#shard-}
            size=$(shard_size "$name") || { echo "study: $archive: unknown shard $name" >&2; exit 2; }
            mkdir -p "$STUDY/$size"
            tar -xzf "$archive" -C "$STUDY/$size"
            echo "study: merged $archive into .study/$size"
        done
        if [ -f "$dir/gpu.json" ]; then cp "$dir/gpu.json" "$ROOT/benchmarks/results/gpu.json"; fi
    done
    python scripts/study_status.py --study "$STUDY" --docs "${STUDY_DOCS:-$ROOT/docs/study}" --extra $EXTRA
}

case "${1:-}" in
    prepare) prepare ;;
    first) first ;;
    shard) shard "${2:?shard needs a name: $SHARDS}" ;;
    shards) echo "$SHARDS" ;;
    collect) shift; [ $# -gt 0 ] || { echo "collect needs the folder(s) the node sent back" >&2; exit 2; }
             collect "$@" ;;
    *) echo "usage: $0 prepare | first | shard NAME | shards | collect DIR..." >&2; exit 2 ;;
esac
