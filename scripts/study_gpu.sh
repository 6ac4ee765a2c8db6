#!/usr/bin/env bash
# The converged study (config/study.yaml) and gpu-check on a rented or borrowed GPU node that has PyTorch but nothing
# else of ours, no internet and no filesystem shared with this checkout, for a short allocation whose limits you give
# (ALLOCATION_S, NODE_COMMAND_S, below; the node may be wiped afterwards). docs/usage.md, "On a GPU node without
# internet". No make or git on the node: bash and python3.
#
#   scripts/study_gpu.sh prepare          # on the checkout's machine (CPU, PyPI): wheels → .whl/
#                                         # (scripts/node_wheels.py), Multi30k preprocessed → .study/data.tar.gz
#   scripts/study_gpu.sh run              # on the node, command 1 (RUN_S): checks (<= 90 s: tools, wheels,
#                                         # one update per model family, a Snakemake dry run), a probe that sizes the
#                                         # run (only with PROBE_S > 0), then the small study: all 6 rows × 3 seeds; results.json and the
#                                         # archive rewritten after every scored run
#   scripts/study_gpu.sh check            # on the node, command 2 (optional, what is left): the full gpu-check
#   scripts/study_gpu.sh shard NAME       # on the node: one transformer_iwslt_de_en-size shard (later allocations)
#   scripts/study_gpu.sh shards           # those shards, in the order allocations should take them
#   scripts/study_gpu.sh budget           # the seconds each step may take, checked against the allocation
#   scripts/study_gpu.sh collect DIR...   # back on the checkout's machine: merge what came back (any number of
#                                         # allocations) into .study/, gpu.json → benchmarks/results/, docs/study/
#
# Shards (models cannot travel back, so a shard holds a baseline together with the rows warm-started from it):
#   small       all 6 rows × 3 seeds at the demo's model size (config/study_small.yaml): what `run` trains
#   seed1..3    transformer_iwslt_de_en size: seed k's baseline, then its three warm-started rows
#   lwc-mlrf    transformer_iwslt_de_en size: LWC and MLRF Dec-SA, 3 seeds each, 6 at once
#   depth6-seed1..4  the CPU study's second depth (config/study_cpu6.yaml, 6+6 layers): every run of seed k, its
#               baseline with the rows warm-started from it, each also translating the held-out sets that
#               `prepare` packed from LWNMT_HELDOUT_DIR; budgets in updates, so a run the command cuts short is
#               trained again whole by the next allocation (models and checkpoints cannot travel back); every run
#               of a seed on a GPU, since a seed's runs all train on one kind of machine (its CPU runs refuse it).
#               Several seeds in one command: depth6-seed2-3 (seeds 2 and 3, three trainings at once per seed)
#   paper6-seed1..3  the same depth's rows on the papers' own protocols (table study_cpu6/T2: LWC beside a pre-norm
#               baseline, MLRF at the baseline's lr, GCA and its control continued for the baseline's budget),
#               seed k's runs with their parent, as depth6-seed<k>; paper6-seed1-2 for two seeds
#
# Settings (environment): OUT (where results go: the folder your node's job sends back; default ./node-out); the
# budgets below (ALLOCATION_S, NODE_START_S, NODE_COMMAND_S, RUN_S and each step's); GPU_CHECK_ARGS and
# PROBE_ARGS (extra gpu_check.py / study_probe.py arguments: the rehearsal's --device cpu and toy sizes); STUDY_EXTRA
# (more overlays, after the shard's); STUDY_JOBS (trainings at once; default: the probe's choice with PROBE_S > 0,
# else 9); STUDY_SITE (where the wheels are unpacked, default /tmp/site); STUDY_DIR and STUDY_WHEELS (prepare's
# output, default .study and .whl); STUDY_PY and STUDY_IMAGE_PACKAGES (prepare: the node's Python and the packages its image already has).
# On a GPU machine with internet and this checkout none of this is needed:
# `snakemake --cores all --configfile config/study.yaml config/study_small.yaml`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
STUDY=${STUDY_DIR:-$ROOT/.study}        # data.tar.gz (carried) and one Snakemake folder per model size
WHEELS=${STUDY_WHEELS:-$ROOT/.whl}
SITE=${STUDY_SITE:-/tmp/site}
OUT=${OUT:-$ROOT/node-out}
EXTRA=$(for f in ${STUDY_EXTRA:-}; do realpath "$f"; done)
SHARDS="small seed1 seed2 seed3 lwc-mlrf depth6-seed1 depth6-seed2 depth6-seed3 depth6-seed4"
SHARDS="$SHARDS paper6-seed1 paper6-seed2 paper6-seed3"  # the papers' protocols at 6+6 (T2)
TASK=multi30k_deen
# The allocation's limits are yours to give: no cluster's are assumed. ALLOCATION_S: its seconds in all, from the
# node's start; NODE_COMMAND_S: the most one command may run; NODE_START_S: how much of the allocation the node's
# start takes (0 if the clock starts with your first command). `run`, `check`, `shard` and `budget` refuse to start
# without the first two.
limits() {
    local missing=""
    [ -n "${ALLOCATION_S:-}" ] || missing="ALLOCATION_S (the allocation's seconds in all)"
    [ -n "${NODE_COMMAND_S:-}" ] || missing="${missing:+$missing and }NODE_COMMAND_S (the most seconds one command may run)"
    if [ -n "$missing" ]; then
        echo "study_gpu.sh $COMMAND: set your node's limits: $missing; e.g. ALLOCATION_S=3600 NODE_COMMAND_S=1800" >&2
        exit 2
    fi
    NODE_START_S=${NODE_START_S:-0}
    # The seconds each step may take (`budget` checks that they add up; every `timeout` below is one of these).
    # Command 1, `run`: the checks, the probe, the study, then the kill's grace and the last pack, a minute short of
    # the command's limit for the results to be sent back.
    RUN_S=${RUN_S:-$((NODE_COMMAND_S - 60))}; CHECKS_MAX_S=${CHECKS_MAX_S:-90}
    ENV_S=${ENV_S:-10}; INSTALL_S=${INSTALL_S:-20}; FAMILIES_S=${FAMILIES_S:-35}; DRYRUN_S=${DRYRUN_S:-25}
    PROBE_S=${PROBE_S:-0}; KILL_S=${KILL_S:-15}; PACK_S=${PACK_S:-10}
    STUDY_S=${STUDY_S:-$((RUN_S - ENV_S - INSTALL_S - FAMILIES_S - DRYRUN_S - PROBE_S - KILL_S - PACK_S))}
    # command 2, `check`: what the allocation has left after the node's start and command 1, within one command
    CHECK_S=${CHECK_S:-$((ALLOCATION_S - NODE_START_S - RUN_S < NODE_COMMAND_S ? ALLOCATION_S - NODE_START_S - RUN_S : NODE_COMMAND_S - 60))}
    GPUCHECK_S=${GPUCHECK_S:-$((CHECK_S - ENV_S - INSTALL_S - KILL_S))}
    SHARD_S=${SHARD_S:-$((NODE_COMMAND_S - INSTALL_S - KILL_S - PACK_S - 30))}  # a later allocation's shard command
}
TOOLS="bash python3 timeout tar gzip sha256sum realpath sed grep find sort cut head tail tee du df date sleep mkdir rm
cat mv cp wc chmod awk"

budget() {  # every step's seconds, and whether they fit the command and the allocation; exit 1 if not
    local bad=0
    row() { printf '  %-44s %5s s\n' "$1" "$2"; }
    fits() { if [ "$2" -gt "$3" ]; then echo "budget: OVER: $1 ($2 s > $3 s)"; bad=1; fi; }
    echo "allocation $ALLOCATION_S s: node start $NODE_START_S s, then commands of at most $NODE_COMMAND_S s each"
    echo "command 1, run ($RUN_S s):"
    row "environment, tools (ENV_S)" "$ENV_S"; row "wheels unpacked, imports (INSTALL_S)" "$INSTALL_S"
    row "one update per model family (FAMILIES_S)" "$FAMILIES_S"; row "Snakemake dry run (DRYRUN_S)" "$DRYRUN_S"
    row "probe: sizes the study (PROBE_S)" "$PROBE_S"; row "the small study (STUDY_S)" "$STUDY_S"
    row "the kill's grace (KILL_S)" "$KILL_S"; row "last results and pack (PACK_S)" "$PACK_S"
    echo "command 2, check ($CHECK_S s): environment $ENV_S s, wheels $INSTALL_S s, gpu-check $GPUCHECK_S s, grace $KILL_S s"
    fits "the checks before the probe" $((ENV_S + INSTALL_S + FAMILIES_S + DRYRUN_S)) "$CHECKS_MAX_S"
    fits "command 1's steps" $((ENV_S + INSTALL_S + FAMILIES_S + DRYRUN_S + PROBE_S + STUDY_S + KILL_S + PACK_S)) "$RUN_S"
    fits "command 1" "$RUN_S" "$NODE_COMMAND_S"
    fits "command 2's steps" $((ENV_S + INSTALL_S + GPUCHECK_S + KILL_S)) "$CHECK_S"
    fits "command 2" "$CHECK_S" "$NODE_COMMAND_S"
    fits "a shard command" $((INSTALL_S + SHARD_S + KILL_S + PACK_S)) "$NODE_COMMAND_S"
    fits "node start + command 1 + command 2" $((NODE_START_S + RUN_S + CHECK_S)) "$ALLOCATION_S"
    [ "$STUDY_S" -gt 0 ] && [ "$GPUCHECK_S" -gt 0 ] || { echo "budget: OVER: no time left for a step"; bad=1; }
    [ $bad = 0 ] && echo "budget: fits"
    return $bad
}

bounded() {  # bounded NAME SECONDS COMMAND...: run it under its budget and say how long it took
    local name=$1 seconds=$2 start=$SECONDS status=0; shift 2
    timeout -s TERM -k "$KILL_S" "$seconds" "$@" || status=$?
    echo "step $name: $((SECONDS - start)) s of its $seconds s (exit $status)"
    return $status
}

shard_size() {
    case $1 in small) echo small ;; seed[123]|lwc-mlrf) echo iwslt ;;
        depth6-seed*|paper6-seed*) depth6_seeds "$1" >/dev/null && echo depth6 ;;
        *) return 1 ;; esac
}
depth6_seeds() {  # the seeds of a 6+6 shard, one a line: depth6-seed2 → 2, paper6-seed2-3 → 2 and 3
    [[ $1 =~ ^(depth6|paper6)-seed[1-9](-[1-9])*$ ]] || return 1
    tr '-' '\n' <<< "${1#*6-seed}"
}
depth6_table() {  # the 6+6 study's table a shard trains: T1 (the earlier recipe) or T2 (the papers' protocols)
    case $1 in paper6-*) echo study_cpu6/T2 ;; *) echo study_cpu6/T1 ;; esac
}
size_configs() {  # the overlays of a model size (prep: the data only), after config.yaml
    if [ "$1" = depth6 ]; then echo "$ROOT/config/study_cpu6.yaml"; extra_configs; return; fi
    echo "$ROOT/config/study.yaml"
    if [ "$1" = small ]; then echo "$ROOT/config/study_small.yaml"; fi
    extra_configs
}
extra_configs() { [ -z "$EXTRA" ] || printf '%s\n' "$EXTRA"; }  # EXTRA: one path a line (a path may hold spaces)
shard_targets() {  # Snakemake targets: each run's test score (tables and figures are built at collect)
    local runs
    case $1 in
        small) runs=$(for s in 1 2 3; do for e in transformer lwc mlrf_dec_sa gca_full dou_deep transformer_longer; do
                   echo "study.$e/seed$s"; done; done) ;;
        seed[123]) runs=$(for e in transformer gca_full dou_deep transformer_longer; do echo "study.$e/seed${1#seed}"; done) ;;
        lwc-mlrf) runs=$(for s in 1 2 3; do echo "study.lwc/seed$s study.mlrf_dec_sa/seed$s"; done) ;;
        depth6-seed*|paper6-seed*)  # the study's own list: each seed's runs, their held-out translations where packed
            for seed in $(depth6_seeds "$1"); do
                python3 -m layerwise_nmt evidence targets --config "$ROOT/config.yaml" \
                    --config "$ROOT/config/study_cpu6.yaml" --table "$(depth6_table "$1")" --seed "$seed"
            done
            return ;;
    esac
    for r in $runs; do echo "results/$TASK/$r/test.score.json"; done
}
shard_jobs() {  # trainings at once: three a seed (the seed's runs wait on its baseline), at most nine
    case $1 in small) echo 9 ;; lwc-mlrf) echo 6 ;; depth6-seed1) echo 5 ;;
        depth6-seed*|paper6-seed*) local n; n=$(depth6_seeds "$1" | wc -l); echo $((n * 3 > 9 ? 9 : n * 3)) ;;
        *) echo 3 ;; esac
}

snake() {  # snakemake TARGETS... OPTIONS... in a model size's folder; the config files go last (a list option)
    local size=$1 configs; shift
    mapfile -t configs < <(size_configs "$size")
    python3 -m snakemake -s "$ROOT/Snakefile" -d "$STUDY/$size" "$@" \
        --configfile "$ROOT/config.yaml" "${configs[@]}"
}

prepare() {
    local packages=${STUDY_IMAGE_PACKAGES:-scripts/node-image-packages.txt} key
    # the wheels are for one Python, one image and our pins: made again when any of them changed
    key="python ${STUDY_PY:-3.12} $(cat "$packages" constraints.txt | sha256sum | cut -c1-16)"
    if [ "$(cat "$WHEELS/.complete" 2>/dev/null)" != "$key" ]; then
        rm -rf "$WHEELS"
        python scripts/node_wheels.py "$WHEELS" --python-version "${STUDY_PY:-3.12}" --image-packages "$packages"
        echo "$key" > "$WHEELS/.complete"
    fi
    mkdir -p "$STUDY/prep"
    snake prep --cores all --until binarize --quiet rules
    tar -czf "$STUDY/data.tar.gz" -C "$STUDY/prep" "results/$TASK/data"
    if [ -n "${LWNMT_HELDOUT_DIR:-}" ]; then  # the held-out sources (a few hundred KB) travel with the data
        rm -rf "$STUDY/heldout" && mkdir -p "$STUDY/heldout" && cp "$LWNMT_HELDOUT_DIR"/* "$STUDY/heldout/"
    fi
    git rev-parse --short HEAD > "$STUDY/commit" 2>/dev/null || true  # the node has no git
    echo "study: prepared $WHEELS ($(du -sh "$WHEELS" | cut -f1)) and $STUDY/data.tar.gz ($(du -h "$STUDY/data.tar.gz" | cut -f1));" \
         "carry both as .whl and .study: 'scripts/study_gpu.sh run', then 'scripts/study_gpu.sh check'"
}

tools() {  # every tool these commands call, found (the node has no make or git; `python` is made if missing)
    local tool missing=""
    for tool in $TOOLS; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
    echo "tools: $(for tool in $TOOLS python nvidia-smi; do printf '%s=%s ' "$tool" "$(command -v "$tool" || echo MISSING)"; done)"
    [ -z "$missing" ] || { echo "study: missing tools:$missing"; return 1; }
}

# The image's python3 is itself a venv: a venv made from it would see the base interpreter's packages (no torch).
# The carried wheels go into a plain folder on PYTHONPATH instead, without a resolver and without touching the image.
setup_env() {
    local wheels module err bad=0
    wheels=$(cat "$ROOT/.whl/.complete" 2>/dev/null || true)
    if [ -n "$wheels" ] && [ "$(cat "$SITE/.installed" 2>/dev/null)" != "$wheels" ]; then  # these wheels, once
        rm -rf "$SITE" && mkdir -p "$SITE"
        python3 "$ROOT/scripts/node_wheels.py" --install "$SITE" "$ROOT"/.whl/*.whl
        echo "$wheels" > "$SITE/.installed"
    fi
    export PYTHONPATH="$ROOT/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
    mkdir -p "$SITE/bin"
    export PATH="$SITE/bin:$PATH"
    # the rules call `python -m layerwise_nmt`: it must be this python3, whatever else `python` names on the node
    printf '#!/bin/sh\nexec '"'%s'"' "$@"\n' "$(command -v python3)" > "$SITE/bin/python" && chmod +x "$SITE/bin/python"
    for module in torch yaml snakemake sacremoses subword_nmt jsonschema sacrebleu; do
        if ! err=$(python3 -c "import $module" 2>&1); then  # the error itself, not only its module
            echo "study: python3 cannot import $module (carry .whl: make study-prepare)"
            printf '%s\n' "$err" | tail -n 4 | sed 's/^/    /'
            bad=1
        fi
    done
    return $bad
}

env_paths() {  # setup_env's PATH and PYTHONPATH, for this shell when setup_env ran in a bounded one
    export PYTHONPATH="$ROOT/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
}

unpack_data() {  # the binarized data, unless this folder has it (a collected .study holds only the texts)
    local size=$1
    [ -f "$STUDY/$size/results/$TASK/data/bin-joint/train.de-en.de.bin" ] && return
    mkdir -p "$STUDY/$size"
    tar -xzf "$STUDY/data.tar.gz" -C "$STUDY/$size"
}

environment() {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(cat "$ROOT/.study/commit" 2>/dev/null || echo unknown) (prepared from)"
    nvidia-smi 2>&1 | head -20 || echo "nvidia-smi: not found"
    python3 -c "import sys, torch; print('python', sys.version.split()[0], sys.executable); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
    df -h "$ROOT" /tmp 2>&1
    nproc 2>/dev/null || true; free -g 2>/dev/null | head -2 || true
    echo "pip freeze (the image's versions: scripts/node-image-versions.txt pins the rehearsal's to these):"
    python3 -m pip freeze 2>&1 | grep -v '^WARNING' || true
}

in_bash() {  # in_bash FUNCTION: a `bash -c` script calling it with ROOT and SITE (quoted: a path may hold spaces)
    printf '%s\nROOT=%q SITE=%q\n%s\n' "$(declare -f "$1")" "$ROOT" "$SITE" "$1"
}

begin() {  # begin LOG: everything said goes to $OUT/LOG too; the environment to env.txt
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/$1") 2>&1
    bounded environment "$ENV_S" bash -c "$(in_bash environment)" > "$OUT/env.txt" 2>&1 || true
    sed -n "1,/^pip freeze/p" "$OUT/env.txt"
    tools
}

small_targets() { shard_targets small; }

results_now() {  # results.json from the runs so far; a new archive when another run was scored since the last
    local scored
    scored=$(python3 "$ROOT/scripts/study_status.py" --node-results "$STUDY/small" --out "$OUT/results.json") || return 0
    if [ "$scored" != "$(cat "$STUDY/small/.packed" 2>/dev/null)" ]; then
        pack small small && echo "$scored" > "$STUDY/small/.packed"
    fi
}

watch_results() { while :; do results_now; sleep 5; done; }

# Command 1: checks, probe, the small study. Everything it makes is in $OUT as soon as it exists.
run() {
    local status=0 imports=0 jobs seconds watcher sized extra
    begin run.log
    echo "budget:"; budget || true
    bounded wheels "$INSTALL_S" bash -c "$(in_bash setup_env)" || imports=1
    env_paths
    unpack_data small
    bounded families "$FAMILIES_S" python3 "$ROOT/benchmarks/study_probe.py" checks --json "$OUT/gpu.json" \
        ${GPU_CHECK_ARGS:-} || status=$?
    [ $imports = 0 ] || { echo "run: the study needs the imports above (make study-prepare, carry .whl)"; return 1; }
    export -f snake size_configs extra_configs; export STUDY ROOT EXTRA
    dry_run || return 1
    mapfile -t extra < <(extra_configs)
    # The probe is off unless PROBE_S is set: on an H100 its two stages (each a Python start, CUDA's set-up and 8 s
    # of training) took over 45 s, and nine small trainings at once, its usual answer, is the default below.
    if [ "$PROBE_S" -gt 0 ]; then
        sized=$(bounded probe "$PROBE_S" python3 "$ROOT/benchmarks/study_probe.py" probe \
            "$STUDY/small/results/$TASK/data/bin-joint" --json "$OUT/gpu.json" --study-seconds "$STUDY_S" \
            --overlays "$ROOT/config/study_small.yaml" "${extra[@]}" ${PROBE_ARGS:-}) || true
        echo "$sized"
    else
        sized=""; echo "run: no probe (PROBE_S=0): nine trainings at once, two waves"
    fi
    jobs=$(echo "$sized" | sed -n 's/^jobs \([0-9]*\) seconds_per_run \([0-9]*\)$/\1/p')
    seconds=$(echo "$sized" | sed -n 's/^jobs \([0-9]*\) seconds_per_run \([0-9]*\)$/\2/p')
    jobs=${STUDY_JOBS:-${jobs:-9}}; seconds=${seconds:-$(( (STUDY_S - 2 * 45) / 2 ))}  # no probe: its guess
    echo "run: $jobs trainings at once, each at most $seconds s"
    per_run_budget "$seconds" > "$STUDY/small/budget.yaml"
    EXTRA=$(extra_configs; echo "$STUDY/small/budget.yaml")
    watch_results & watcher=$!
    trap "kill $watcher 2>/dev/null; results_now; echo \"run: exit at \$(date -u +%T)\"" EXIT
    study small "$jobs" "$STUDY_S" || status=$?
    return $status
}

dry_run() {  # the workflow's imports and DAG on the node; its data unpacked here (nothing to download)
    local said status=0
    said=$(bounded dry-run "$DRYRUN_S" bash -c 'snake "$@"' snake small $(small_targets) -n --quiet rules 2>&1) \
        || status=$?
    echo "$said"
    [ $status = 0 ] || { echo "run: the workflow's dry run failed (above)"; return 1; }
    if echo "$said" | grep -qE '^(fetch|extract|binarize)[[:space:]]'; then
        echo "run: the dry run would prepare the data again (no internet here): $STUDY/small lacks the unpacked data"
        return 1
    fi
}

per_run_budget() {  # an overlay: each run of the study stops training after $1 seconds (then averages, decodes)
    echo "experiments:"
    for e in transformer lwc mlrf_dec_sa gca_full dou_deep transformer_longer; do
        echo "  study.$e: {train: {max_minutes: $(awk "BEGIN {print $1 / 60}")}}"
    done
}

study() {  # study SHARD JOBS SECONDS: its trainings, JOBS at once, the whole of it within SECONDS
    local name=$1 jobs=$2 seconds=$3 size status=0 start=$SECONDS done=0 total=0 t
    size=$(shard_size "$name")
    snake "$size" --unlock >/dev/null 2>&1 || true
    # gpus_per_job 0: the small models share the one GPU, no job holds its lock; a training stopped by the budget
    # checkpoints on SIGTERM (its logs and metrics come back; its model cannot)
    export -f snake size_configs extra_configs; export STUDY ROOT EXTRA
    bounded "study $name" "$seconds" bash -c 'snake "$@"' snake "$size" $(shard_targets "$name") \
        --cores all --rerun-incomplete --keep-going --config gpus_per_job=0 --set-threads train=1 \
        --resources "train_slots=$jobs" --set-resources train:train_slots=1 || status=$?
    for t in $(shard_targets "$name"); do total=$((total + 1)); [ -f "$STUDY/$size/$t" ] && done=$((done + 1)); done
    echo "study: shard $name: $done of $total runs scored in $((SECONDS - start)) s (snakemake exit $status)"
    [ "$done" = "$total" ]
}

# Command 2 (optional): the full gpu-check, every family × precision, speed rows with MFU, in what is left
check() {
    local status=0
    begin check.log
    bounded wheels "$INSTALL_S" bash -c "$(in_bash setup_env)" || true
    env_paths
    bounded gpu-check "$GPUCHECK_S" python3 "$ROOT/benchmarks/gpu_check.py" --json "$OUT/gpu-full.json" \
        ${GPU_CHECK_ARGS:-} || status=$?
    echo "check: gpu_check exit $status"
    return $status
}

shard() {  # a transformer_iwslt_de_en-size shard, a later allocation's command
    local name=$1 size
    size=$(shard_size "$name") || { echo "study: unknown shard $name; known: $SHARDS" >&2; exit 2; }
    begin "shard-$name.log"
    trap "pack $name $size" EXIT  # whatever happens, what the shard made comes back
    setup_env
    unpack_data "$size"
    if [ -d "$STUDY/heldout" ]; then export LWNMT_HELDOUT_DIR="$STUDY/heldout"; fi
    study "$name" "${STUDY_JOBS:-$(shard_jobs "$name")}" "$SHARD_S"
}

# what the tables and figures read (scores, hypotheses, metrics, training.json, logs, and the test/valid texts that
# the bootstrap and the length buckets compare against): one small archive per shard, no models; written beside
# and then renamed, so that a cut at any moment leaves the previous archive whole
pack() {
    local name=$1 size=$2
    ( cd "$STUDY/$size" 2>/dev/null || exit 0
      { find results -path '*/data' -prune -o -type f \( -name '*.json' -o -name '*.txt' -o -name '*.csv' \
            -o -name '*.log' -o -name '*.tsv' -o -name '*.bpe' -o -name '*.detok' \) -print
        find results -path '*/data/text/*' -type f \( -name 'test.*' -o -name 'valid.*' \) -print
      } | tar -czf "$OUT/.shard-$name.tar.gz" -T - && mv -f "$OUT/.shard-$name.tar.gz" "$OUT/shard-$name.tar.gz" )
}

collect() {
    local dir archive name size gpu extra
    for dir in "$@"; do
        for archive in "$dir"/shard-*.tar.gz; do
            [ -f "$archive" ] || continue
            name=$(basename "$archive" .tar.gz); name=${name#shard-}
            size=$(shard_size "$name") || { echo "study: $archive: unknown shard $name" >&2; exit 2; }
            mkdir -p "$STUDY/$size"
            tar -xzf "$archive" -C "$STUDY/$size"
            echo "study: merged $archive into $STUDY/$size"
        done
        for gpu in "$dir/gpu.json" "$dir/gpu-full.json"; do  # the full check, where it ran, is the one kept
            if [ -f "$gpu" ]; then cp "$gpu" "$ROOT/benchmarks/results/gpu.json"; fi
        done
    done
    mapfile -t extra < <(extra_configs)
    python scripts/study_status.py --study "$STUDY" --docs "${STUDY_DOCS:-$ROOT/docs/study}" --extra "${extra[@]}"
    if [ -d "$STUDY/depth6/results" ]; then  # the second depth's finished runs join the CPU study's evidence
        for table in study_cpu6/T1 study_cpu6/T2; do
            python -m layerwise_nmt evidence copy --config config.yaml --config config/study_cpu6.yaml \
                --table "$table" --results "$STUDY/depth6" --out docs/study/cpu6 --partial
        done
        make study-cpu6-collect
    fi
}

COMMAND=${1:-}
case "$COMMAND" in
    prepare) prepare ;;
    run) limits; run ;;
    check | first) limits; check ;;
    shard) limits; shard "${2:?shard needs a name: $SHARDS}" ;;
    shards) echo "$SHARDS" ;;
    budget) limits; budget ;;
    collect) shift; [ $# -gt 0 ] || { echo "collect needs the folder(s) the node sent back" >&2; exit 2; }
             collect "$@" ;;
    *) echo "usage: $0 prepare | run | check | shard NAME | shards | budget | collect DIR..." >&2; exit 2 ;;
esac
