#!/usr/bin/env bash
# `make node-rehearsal` (CI runs it): a GPU node's environment rebuilt on this CPU machine, and in it the exact
# commands an allocation on the node runs (scripts/study_gpu.sh first, then shard small), with --device cpu and toy
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
#     no .venv, its size checked against CARRY_LIMIT_MIB (default 64);
#   - what comes back checked against the limits: <= FILES_BACK files (default 8), <= FILE_BACK_MIB each (16),
#     <= BACK_LIMIT_MIB in all (64), <= BACK_DEPTH folders deep (2), names of letters, digits, '.', '_', '-';
#   - the returned folders collected here, and docs/study's status built from them (into the rehearsal folder).
# Each step says PASS or FAIL and why; exit 1 if any failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WORK=${REHEARSAL_DIR:-$ROOT/.node-rehearsal}
IMAGE=$WORK/image
TREE=$WORK/tree
HOST_PY=${PYTHON:-python3}
CARRY_LIMIT_MIB=${CARRY_LIMIT_MIB:-64}
export FILES_BACK=${FILES_BACK:-8} FILE_BACK_MIB=${FILE_BACK_MIB:-16} BACK_LIMIT_MIB=${BACK_LIMIT_MIB:-64} \
    BACK_DEPTH=${BACK_DEPTH:-2}
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

prepare() {  # here, as a user would: `make study-prepare`, for the image's Python, against its package list
    rm -rf .study
    STUDY_PY=$("$IMAGE/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
        STUDY_IMAGE_PACKAGES=$IMAGE_PACKAGES STUDY_EXTRA=$WORK/toy.yaml bash scripts/study_gpu.sh prepare
}

copy_tree() {  # what is sent to the node: tracked + untracked-not-ignored files, and the carried folders
    rm -rf "$TREE" && mkdir -p "$TREE"
    { git ls-files -co --exclude-standard; find .whl .study -type f; } | sort -u | while read -r f; do
        [ -f "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf - | tar -xf - -C "$TREE"
    local size; size=$(du -sb "$TREE" | cut -f1)
    say "sent: $(find "$TREE" -type f | wc -l) files, $((size / 1024 / 1024)) MiB (limit $CARRY_LIMIT_MIB MiB)"
    [ "$size" -le $((CARRY_LIMIT_MIB * 1024 * 1024)) ]
}

on_node() {  # on_node OUT COMMAND...: in the copy, with the image's python3 first on PATH and nothing of ours
    local out=$1; shift
    rm -rf "$out" && mkdir -p "$out"
    ( cd "$TREE" && env -u LWNMT_DATA_MIRROR -u VIRTUAL_ENV -u PYTHONPATH OUT="$out" PATH="$IMAGE/bin:/usr/bin:/bin" \
        STUDY_SITE="$WORK/site" STUDY_EXTRA="$WORK/toy.yaml" "$@" )
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
sys.exit(0 if result["all_checks_ok"] and not errors and speed and probe else 1)
EOF
}

mkdir -p "$WORK"
rm -rf "$WORK/site"  # each allocation starts on a wiped node: nothing installed from an earlier one
step "image like the GPU node's" build_image || { say "cannot continue without the image"; exit 1; }
toy_overlay
step "prepare here (wheels for the image, toy data)" prepare || { say "cannot continue without .whl/.study"; exit 1; }
step "what travels fits $CARRY_LIMIT_MIB MiB" copy_tree
GPU_CHECK_ARGS="--device cpu --families transformer_post lwc --precisions fp16 fp32 --updates 1 --warmup 0 \
--max-tokens 256 --speed-rows transformer_iwslt_de_en --probe-seconds 8"
step "first command (study_gpu.sh first)" on_node "$WORK/out1" env GPU_CHECK_ARGS="$GPU_CHECK_ARGS" \
    FIRST_SECONDS=900 bash scripts/study_gpu.sh first
step "first command's gpu.json: every check, speed row and probe" gpu_json_ok "$WORK/out1/gpu.json"
step "first command's files come back" returned_ok "$WORK/out1"
step "the precision, loss-scaler, optimizer and throughput tests on the image's torch" on_node "$WORK/tests" env \
    PYTHONPATH=src:"$WORK/site" python3 -m pytest -q -p no:cacheprovider tests/test_precision_branches.py \
    tests/test_optimizer.py tests/test_throughput.py
step "shard small (study_gpu.sh shard small)" on_node "$WORK/out2" env STUDY_SECONDS=900 STUDY_JOBS=2 \
    bash scripts/study_gpu.sh shard small
step "shard's files come back" returned_ok "$WORK/out2"
collect() {
    rm -rf "$WORK/collected" && mkdir -p "$WORK/collected"
    ( cd "$TREE" && rm -rf .study/small .study/iwslt && STUDY_DOCS="$WORK/collected/docs-study" \
        PATH="$ROOT/.venv/bin:$PATH" STUDY_EXTRA="$WORK/toy.yaml" bash scripts/study_gpu.sh collect "$WORK/out1" "$WORK/out2" ) &&
        grep -q "18 of 18 runs" "$WORK/collected/docs-study/README.md" && [ -f "$WORK/collected/docs-study/small/T1.md" ]
}
step "collect here: docs/study says 18 of 18 (small) and holds its table" collect
if [ ${#failures[@]} -eq 0 ]; then say "all steps passed"; exit 0; fi
say "${#failures[@]} step(s) failed: ${failures[*]}"
exit 1
