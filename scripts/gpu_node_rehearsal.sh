#!/usr/bin/env bash
# `make node-rehearsal` (CI runs it): a GPU node's environment rebuilt on this CPU machine, and in it the exact
# commands an allocation on the node runs (scripts/study_gpu.sh run, then check), with --device cpu and toy
# budgets. The node is the one docs/usage.md describes: PyTorch but nothing else of ours, no internet, no filesystem
# shared with the checkout, and limits on what is sent and what comes back.
#
#   - an image like the node's: python3 inside a venv of Python 3.12 holding the image's packages that we use, at
#     the versions of scripts/node-image-versions.txt (torch 2.11.0, a CUDA build, on this CPU; numpy 2.5.2; pandas,
#     matplotlib, sacrebleu, tensorboard, and what the carried wheels take from the image) and none that it lacks
#     (no jsonschema, snakemake, sacremoses, subword-nmt: those travel as wheels, made by `study_gpu.sh prepare`
#     against the image's package list, scripts/node-image-packages.txt, as for a real node).
#     Without a Python 3.12 here (REHEARSAL_PYTHON, python3.12 on PATH, or pyenv's), if those ~3 GB cannot be
#     downloaded, or with REHEARSAL_PYTHON=host: this machine's python3 with the pinned torch 2.13 CPU build and
#     constraints.txt, and the output says so;
#   - a copy of only what travels there: tracked and untracked-not-ignored files plus the carried .whl and .study,
#     no .venv, its size checked against CARRY_LIMIT_MIB;
#   - what comes back checked against the limits: <= FILES_BACK files, <= FILE_BACK_MIB each, <= BACK_LIMIT_MIB in
#     all, <= BACK_DEPTH folders deep, names of letters, digits, '.', '_', '-';
#   - the returned folders collected here, and docs/study's status built from them (into the rehearsal folder);
#   - the node's limits the scripts must respect: each step's seconds add up under the allocation (study_gpu.sh
#     budget, a static check), the node has no make, git or `python` (only bash, python3 and the usual tools), a
#     broken wheel shows its import error and still leaves the GPU checks in gpu.json, a second allocation carrying
#     a collected .study unpacks its data again (no download); and a prepared .study/.whl here is never touched
#     (the rehearsal prepares its own, under REHEARSAL_DIR, kept between runs with the image as a cache).
# Each step says PASS or FAIL and why; exit 1 if any failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WORK=${REHEARSAL_DIR:-$ROOT/.node-rehearsal}
IMAGE=${NODE_IMAGE_DIR:-$WORK/image}  # NODE_IMAGE_DIR: keep the ~5 GB image between runs (rebuilt when its versions change)
TREE=$WORK/tree
HOST_PY=${PYTHON:-python3}
# The node's limits, yours to give (no cluster's are assumed): those of study_gpu.sh's allocation, and what may be
# sent to the node and come back from it.
missing=$(for limit in ALLOCATION_S NODE_COMMAND_S CARRY_LIMIT_MIB FILES_BACK FILE_BACK_MIB BACK_LIMIT_MIB BACK_DEPTH; do
    [ -n "${!limit:-}" ] || printf ' %s' "$limit"; done)
if [ -n "$missing" ]; then
    echo "gpu_node_rehearsal.sh: set your node's limits:$missing (docs/usage.md, \"On a GPU node without internet\")" >&2
    exit 2
fi
export ALLOCATION_S NODE_COMMAND_S ${NODE_START_S:+NODE_START_S} FILES_BACK FILE_BACK_MIB BACK_LIMIT_MIB BACK_DEPTH
failures=()

say() { echo "node-rehearsal: $*"; }
step() {  # step NAME COMMAND...: run, report PASS/FAIL
    local name=$1; shift
    local start=$SECONDS
    if "$@"; then say "PASS $name ($((SECONDS - start)) s)"; else say "FAIL $name ($((SECONDS - start)) s)"; failures+=("$name"); return 1; fi
}

node_python() {  # the node's Python (3.12) here, if any (REHEARSAL_PYTHON=host: use this machine's python3)
    local found
    [ "${REHEARSAL_PYTHON:-}" = host ] && return 1
    for found in "${REHEARSAL_PYTHON:-}" "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12*/bin/python3.12; do
        if [ -n "$found" ] && [ -x "$found" ] && "$found" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
            echo "$found"; return 0
        fi
    done
    return 1
}

install_image() {  # install_image KEY PYTHON: the image venv, unless the one there was made for KEY
    local key=$1 python=$2
    [ -x "$IMAGE/bin/python3" ] && [ "$(cat "$IMAGE/.complete" 2>/dev/null)" = "$key" ] && return 0
    rm -rf "$IMAGE"
    "$python" -m venv "$IMAGE" || return 1
    if [ "${key%% *}" = python3.12 ]; then  # the image's versions, exactly: nothing resolved, nothing added
        "$IMAGE/bin/pip" install --quiet --disable-pip-version-check --no-deps -r scripts/node-image-versions.txt
    else
        "$IMAGE/bin/pip" install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0 numpy \
            pyyaml pandas matplotlib sacrebleu tensorboard packaging
    fi || { rm -rf "$IMAGE"; return 1; }
    echo "$key" > "$IMAGE/.complete"
}

build_image() {
    local python key
    # the node's software if this machine can have it (a Python 3.12, ~3 GB of torch 2.11 from PyPI); else, or if
    # that download fails, this machine's python3 with the pinned torch, said below
    if python=$(node_python) && key="python3.12 $(sha256sum scripts/node-image-versions.txt | cut -c1-16)" &&
        install_image "$key" "$python"; then :
    else
        [ -n "${key:-}" ] && say "could not install scripts/node-image-versions.txt into a Python 3.12 venv (above)"
        python=$HOST_PY key="host $(sha256sum constraints.txt | cut -c1-16)"
        install_image "$key" "$python" || return 1
    fi
    "$IMAGE/bin/python3" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 > "$WORK/image-packages.txt"
    say "image: $("$IMAGE/bin/python3" -c 'import sys, torch, numpy; print("python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__)') (the node image: python 3.12, torch 2.11.0+cu130, numpy 2.5.2)"
    if [ "${key%% *}" = python3.12 ]; then
        IMAGE_PACKAGES=scripts/node-image-packages.txt  # what the node gets carried: the wheels the image lacks, only
        image_has_what_the_node_relies_on || return 1
    else
        IMAGE_PACKAGES=$WORK/image-packages.txt
        say "not the node's software: this machine's $("$python" --version 2>&1 | tr -d '\n') and torch 2.13 (no Python 3.12 here, its packages could not be installed, or REHEARSAL_PYTHON=host)"
    fi
    for missing in jsonschema snakemake sacremoses subword_nmt; do
        if "$IMAGE/bin/python3" -c "import $missing" 2>/dev/null; then say "the image has $missing: it must not"; return 1; fi
    done
}

image_has_what_the_node_relies_on() {  # every package taken from the image instead of carried is in ours
    "$ROOT/.venv/bin/python" - "$WORK/image-packages.txt" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
import node_wheels
ours = {node_wheels.canonical(n) for n in Path(sys.argv[1]).read_text().split()}
relied = {n for n in node_wheels.closure() if n in node_wheels.image_packages(Path("scripts/node-image-packages.txt"))}
missing = sorted(relied - ours)
if missing:
    print(f"node-rehearsal: the node takes {', '.join(missing)} from the image: add them to scripts/node-image-versions.txt")
sys.exit(1 if missing else 0)
PY
}

toy_overlay() {  # the study at toy size: 200 training pairs, 1+1 layers of d=32, 2 epochs
    "$ROOT/.venv/bin/python" - "$WORK/toy.yaml" <<'EOF'
import sys, yaml
tiny = {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
names = ("study.transformer", "study.lwc", "study.mlrf_dec_sa", "study.gca_full", "study.dou_deep",
         "study.transformer_longer")
experiments = {n: {"arch": dict(tiny), "train": {"max_tokens": 512, "warmup_updates": 5, "max_epoch": 2, "patience": 0,
                                                  "amp": "none", "log_interval": 10},
                   "decode": {"beam": 2}, "average": {"num": 2, "by": "epoch"}} for n in names}
experiments["study.lwc"]["arch"] = {"d_model": 32, "d_ff": 64, "heads": 2, "layers": 2, "preset": "small"}
experiments["study.dou_deep"]["arch"].update(encoder_layers=2, decoder_layers=2)  # diversity: adjacent layers
task = {"splits": {"train": {"max_lines": 200}, "valid": {"max_lines": 30}, "test": {"max_lines": 30}},
        "bpe": {"merges": 150}}
yaml.safe_dump({"tasks": {"multi30k_deen": task}, "experiments": experiments}, open(sys.argv[1], "w"))
EOF
}

prepare() {  # as a user would (`make study-prepare`), for the image's Python, into the rehearsal's own folder
    rm -rf "$PAYLOAD/.study"
    STUDY_PY=$("$IMAGE/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
        STUDY_DIR=$PAYLOAD/.study STUDY_WHEELS=$PAYLOAD/.whl STUDY_IMAGE_PACKAGES=$IMAGE_PACKAGES \
        STUDY_EXTRA=$WORK/toy.yaml bash scripts/study_gpu.sh prepare
}

fingerprint() {  # what a user prepared here (.study, .whl): names, sizes and times
    find .study .whl -printf '%p %s %T@\n' 2>/dev/null | sort | sha256sum | cut -c1-16
}

copy_tree() {  # what is sent to the node: tracked + untracked-not-ignored files, and the carried folders
    rm -rf "$TREE" && mkdir -p "$TREE"
    git ls-files -co --exclude-standard | while read -r f; do
        [ -f "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf - | tar -xf - -C "$TREE"
    cp -r "$PAYLOAD/.whl" "$PAYLOAD/.study" "$TREE/"
    rm -rf "$TREE/.study/prep"  # prepare's Snakemake folder stays here, as a user's does
    local size; size=$(du -sb "$TREE" | cut -f1)
    say "sent: $(find "$TREE" -type f | wc -l) files, $((size / 1024 / 1024)) MiB (limit $CARRY_LIMIT_MIB MiB)"
    [ "$size" -le $((CARRY_LIMIT_MIB * 1024 * 1024)) ]
}

node_bin() {  # the node's tools: this machine's, less make, git and any python; python3 is the image's
    rm -rf "$WORK/bin" && mkdir -p "$WORK/bin"
    local tool
    for tool in /usr/bin/* /bin/*; do
        case ${tool##*/} in make | gmake | git | python | python[0-9]*) continue ;; esac
        [ -e "$WORK/bin/${tool##*/}" ] || ln -s "$tool" "$WORK/bin/${tool##*/}"
    done
    printf '#!/bin/sh\nexec '"'%s'"' "$@"\n' "$IMAGE/bin/python3" > "$WORK/bin/python3" && chmod +x "$WORK/bin/python3"
}

on_node() {  # on_node OUT COMMAND...: in the copy, with the node's tools only and nothing of ours
    local out=$1; shift
    mkdir -p "$out"
    ( cd "$TREE" && env -u LWNMT_DATA_MIRROR -u VIRTUAL_ENV -u PYTHONPATH OUT="$out" PATH="$WORK/bin" \
        STUDY_SITE="${SITE:-$WORK/site}" STUDY_EXTRA="$WORK/toy.yaml" "$@" )
}

returned_ok() {  # the node's limits on what comes back (FILES_BACK, FILE_BACK_MIB, BACK_LIMIT_MIB, BACK_DEPTH)
    python3 - "$1" <<'EOF'
import os, re, sys
root = sys.argv[1]
count, each, depth, whole = (int(os.environ[k]) for k in ("FILES_BACK", "FILE_BACK_MIB", "BACK_DEPTH", "BACK_LIMIT_MIB"))
files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
bad = [f for f in files if not re.fullmatch(r"[A-Za-z0-9._-]+", os.path.basename(f))]
deep = [f for f in files if os.path.relpath(f, root).count(os.sep) > depth]
big = [f for f in files if os.path.getsize(f) > each * 2**20]
total = sum(os.path.getsize(f) for f in files)
problems = ([f"{len(files)} files (limit {count})"] if len(files) > count else []) + \
    [f"too big: {f}" for f in big] + [f"odd name: {f}" for f in bad] + [f"too deep: {f}" for f in deep] + \
    ([f"{total} bytes (limit {whole} MiB)"] if total > whole * 2**20 else [])
print(f"returned: {len(files)} files, {total / 2**20:.1f} MiB: {', '.join(sorted(os.path.basename(f) for f in files))}")
for p in problems:
    print("  limit broken:", p)
sys.exit(1 if problems or not files else 0)
EOF
}

gpu_json_ok() {
    "$ROOT/.venv/bin/python" - "$1" <<'EOF'
import json, sys
result = json.load(open(sys.argv[1]))
families = result["checks"]["families"]
speed = result["speed"]
probe = result.get("probe", {}).get("runs", [])
print(f"gpu.json: {len(families)} family/precision checks, {len(speed)} speed rows, probe {probe}, "
      f"all_checks_ok {result['all_checks_ok']}")
errors = [f"{k}/{c}: {v.get('error', 'failed')}" for k, f in families.items() for c, v in f.items() if not v["ok"]]
errors += [f"speed {r['model']}: {r['error']}" for r in speed if "error" in r]
for e in errors:
    print("  ", e)
sys.exit(0 if result["all_checks_ok"] and not errors and speed else 1)
EOF
}

results_ok() {  # results.json: every run of the small study scored, with its numbers
    "$ROOT/.venv/bin/python" - "$1" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
keys = ("bleu", "updates", "target_tokens_per_second", "train_seconds", "job_wall_seconds")
missing = [f"{r['experiment']}/seed{r['seed']}" for r in result["runs"] if not all(r.get(k) is not None for k in keys)]
print(f"results.json: {result['scored']} scored of {result['started']} started; without all of {keys}: {missing}")
sys.exit(0 if result["scored"] == 18 and not missing else 1)
PY
}

checks_ok() {  # gpu.json after `run`: one update per family, and the probe's plan
    "$ROOT/.venv/bin/python" - "$1" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
families, plan = result["checks"]["families"], result["probe"].get("plan", {})
print(f"gpu.json: {len(families)} family updates ({sorted(families)}), probe {result['probe'].get('runs')}, plan {plan}")
sys.exit(0 if families and all(c["one_update"]["ok"] for c in families.values()) and plan.get("measured") else 1)
PY
}

broken_wheel() {  # a site whose jsonschema is broken: the import error shown, the GPU checks still in gpu.json
    rm -rf "$WORK/site-broken" "$WORK/out-broken" && cp -r "$WORK/site" "$WORK/site-broken"
    rm -rf "$WORK/site-broken/jsonschema"
    SITE=$WORK/site-broken on_node "$WORK/out-broken" env GPU_CHECK_ARGS="--device cpu --families transformer_post" \
        FAMILIES_S=120 bash scripts/study_gpu.sh run > "$WORK/broken.txt" 2>&1
    local status=$?
    grep -E "cannot import jsonschema|ModuleNotFoundError|step families|run: the study needs" "$WORK/broken.txt"
    [ $status != 0 ] && grep -q "ModuleNotFoundError: No module named 'jsonschema'" "$WORK/broken.txt" &&
        grep -q '"one_update"' "$WORK/out-broken/gpu.json"
}

collect() {
    rm -rf "$WORK/collected" && mkdir -p "$WORK/collected"
    ( cd "$TREE" && rm -rf .study/small .study/iwslt && STUDY_DOCS="$WORK/collected/docs-study" \
        PATH="$ROOT/.venv/bin:$PATH" STUDY_EXTRA="$WORK/toy.yaml" bash scripts/study_gpu.sh collect "$WORK/out1" ) &&
        grep -q "18 of 18 runs" "$WORK/collected/docs-study/README.md" && [ -f "$WORK/collected/docs-study/small/T1.md" ] &&
        grep -qE "\| (held|not held) \|" "$WORK/collected/docs-study/README.md"
}

second_allocation() {  # the collected .study carried again to a wiped node: its data unpacked, nothing to download
    cp -r "$TREE/.study" "$PAYLOAD/.study-collected"
    rm -rf "$PAYLOAD/.study" && mv "$PAYLOAD/.study-collected" "$PAYLOAD/.study"
    copy_tree && rm -rf "$WORK/site" "$WORK/out3" &&
        on_node "$WORK/out3" env GPU_CHECK_ARGS="--device cpu --families transformer_post" \
            PROBE_ARGS="$PROBE_ARGS" $TOY_BUDGETS bash scripts/study_gpu.sh run &&
        [ -d "$TREE/.study/small/results/multi30k_deen/data/bin-joint" ] && results_ok "$WORK/out3/results.json"
}

mkdir -p "$WORK"
PAYLOAD=$WORK/payload  # the rehearsal's own .study and .whl: a user's prepared ones are never touched
rm -rf "$WORK/site" "$WORK/out1"  # each allocation starts on a wiped node: nothing installed from an earlier one
before=$(fingerprint)
step "each step's seconds fit the allocation (study_gpu.sh budget)" bash scripts/study_gpu.sh budget
step "image like the GPU node's" build_image || { say "cannot continue without the image"; exit 1; }
toy_overlay
node_bin
step "prepare here (wheels for the image, toy data)" prepare || { say "cannot continue without .whl/.study"; exit 1; }
step "what travels fits $CARRY_LIMIT_MIB MiB" copy_tree
# the CPU is slower than the node's GPU: the toy run gets the seconds it needs; the allocation's are checked above
TOY_BUDGETS="FAMILIES_S=120 DRYRUN_S=120 PROBE_S=180 STUDY_S=1500 STUDY_JOBS=2"
PROBE_ARGS="--device cpu --seconds 5 --together 1 2"
step "command 1 (study_gpu.sh run), no make, git or python on the node" on_node "$WORK/out1" env \
    GPU_CHECK_ARGS="--device cpu --families transformer_post lwc" PROBE_ARGS="$PROBE_ARGS" $TOY_BUDGETS \
    bash scripts/study_gpu.sh run
grep -h "^step \|^run: " "$WORK/out1/run.log" | sed 's/^/    /'
step "command 1's results.json: 18 runs scored, each with its numbers" results_ok "$WORK/out1/results.json"
step "command 1's gpu.json: one update per family, the probe's plan" checks_ok "$WORK/out1/gpu.json"
step "a broken wheel shows its import error; the GPU checks still run" broken_wheel
# the checks in fp16 and fp32, the speed row in fp32 only: on a CPU without fp16 kernels an fp16 row of this size
# is minutes of emulation (150 s of 180 s on AVX2)
step "command 2 (study_gpu.sh check)" on_node "$WORK/out1" env GPU_CHECK_ARGS="--device cpu --families \
transformer_post lwc --precisions fp16 fp32 --speed-precisions fp32 --updates 1 --warmup 0 --max-tokens 256 \
--speed-rows transformer_iwslt_de_en" GPUCHECK_S=1200 bash scripts/study_gpu.sh check
step "command 2's gpu-full.json: every check and speed row" gpu_json_ok "$WORK/out1/gpu-full.json"
step "both commands' files come back" returned_ok "$WORK/out1"
step "the precision, loss-scaler, optimizer and throughput tests on the image's torch" on_node "$WORK/tests" env \
    PYTHONPATH=src:"$WORK/site" python3 -m pytest -q -p no:cacheprovider tests/test_precision_branches.py \
    tests/test_optimizer.py tests/test_throughput.py
step "collect here: docs/study says 18 of 18 (small), its table, each claim held or not" collect
step "a second allocation after a collect: data unpacked again, no download" second_allocation
step "a prepared .study/.whl here untouched" test "$(fingerprint)" = "$before"
if [ ${#failures[@]} -eq 0 ]; then say "all steps passed"; exit 0; fi
say "${#failures[@]} step(s) failed: ${failures[*]}"
exit 1
