"""The rehearsal config: the full grid with every row's structure kept and only its sizes shrunk.

Kept: every task, split, part and recipe option; every experiment's model and flags, layer counts, kernel sizes,
warm-start chain, seeds, update_freq, schedule kind, RestartAdam phases, averaging policy (by epoch / by update),
early stopping, decoding and scoring settings; every table and figure. Shrunk: d_model / d_ff / heads (and the
fusion sizes), BPE merges and word vocabularies, corpus lines, and budgets.

Budgets keep their relation to the epoch. Every budget-like setting is converted to epochs with the real run's
estimated updates per epoch (`plan.budget`), compressed by one monotone map (`squeeze`: identity up to 2 epochs,
logarithmic beyond), and converted back with the rehearsal's own updates per epoch. A monotone map keeps every
comparison that decides whether a policy works (averaged checkpoints ≤ epochs, patience < epochs, warm-up < run,
restart < end), and a run that ends mid-epoch is made to end mid-epoch here too; so a row whose averaging cannot
work on the real data fails here the same way. One comparison mixes two budgets the map moves differently (the
first averaged checkpoint against the warm-up's end): the rehearsal's warm-up is moved to the real one's side.
"""

from __future__ import annotations

import json
import math

from .. import grid
from ..grid.budget_checks import averaged_from, budget
from ..grid.reports import ATTENTION_SENTENCE
from ..training.config import AVERAGE_DEFAULTS, TRAIN_DEFAULTS
from .standins import EVAL_LINES, TRAIN_LINES, Manifest

TINY_ARCH = {"d_model": 16, "d_ff": 32, "heads": 2}
TINY_FUSION = {"d_a": 16, "d_f": 16}
BPE_MERGES = 3000  # stand-in sentences of ~38 BPE tokens rather than ~72 at 200 merges: the toy rows train ~40% faster
WORD_VOCAB = 400
UPDATES_PER_EPOCH = 3  # the rehearsal's epoch where update_freq allows …
BATCHES_PER_EPOCH = 256  # … else fewer (≥ 2): an epoch of update_freq 128 is 256 batches, not 384
NOTICE = "REHEARSAL — tiny models on stand-in data: the numbers have no BLEU meaning."


def squeeze(epochs: float) -> float:
    """Monotone compression of an epoch count: x up to 2, then 2 + ln(x / 2) / 2 (100 → 3.96, 10 → 2.8)."""
    return epochs if epochs <= 2 else 2 + math.log(epochs / 2) / 2


def squeeze_count(n: int, down: bool = False) -> int:
    """An epoch-like count squeezed; `down` rounds down, so that a count of checkpoints that fits the real run's
    whole epochs (N ≤ ⌊E⌋) still fits the rehearsal's (⌊g(N)⌋ ≤ ⌊g(E)⌋, g being monotone)."""
    if not n:
        return 0
    return max(1, math.floor(squeeze(n)) if down else round(squeeze(n)))


def shrink(config: dict, manifest: Manifest) -> dict:
    """The rehearsal config from the full one (which is left untouched)."""
    real = json.loads(json.dumps(config))  # not deepcopy: it would keep YAML anchors' shared dicts shared
    grid.resolve_extends(real.get("experiments", {}))
    out = json.loads(json.dumps(real))
    out["data_mirror"] = None  # set by the caller to the stand-in mirror
    for dataset, path in manifest.user_paths.items():
        out["datasets"][dataset]["user_path"] = path
    for (dataset, name), digest in manifest.digests.items():
        spec = out["datasets"][dataset]
        for entry in (spec.get("archives", {}).get(name), spec.get("files", {}).get(name)):
            for kind in ("sha256", "md5", "git_blob"):
                if entry is not None and kind in entry:
                    entry[kind] = digest[kind]  # the stand-in's own digest: the checksum code still runs
    for task in out["tasks"].values():
        shrink_task(task)
    out["rehearsal"] = {
        "notice": NOTICE,
        "experiments": {
            name: shrink_experiment(real, name, spec, out["tasks"][spec["task"]])
            for name, spec in out.get("experiments", {}).items()
        },
    }
    for name in out.get("experiments", {}):
        keep_warmup_side(real, out, name)
    for paper in out.get("papers", {}).values():
        paper["title"] = f"{NOTICE} {paper.get('title', '')}"
        for table in paper.get("tables", {}).values():
            table["scale"] = f"{NOTICE} {table.get('scale', '')}".strip()
        for figure in paper.get("figures", {}).values():
            figure["caption"] = f"{NOTICE} {figure.get('caption', '')}".strip()
            if figure.get("kind") == "attention":  # the paper's sentence, or the stand-in test set's last
                figure["sentence"] = min(figure.get("sentence", ATTENTION_SENTENCE), EVAL_LINES - 1)
    return out


def shrink_task(task: dict) -> None:
    task.pop("reference", None)  # fairseq's blob ids describe the real corpus, not the stand-ins
    for name, split in task["splits"].items():
        if split.get("format") != "nist":  # a cut would keep the first references of a multi-reference set only
            split["max_lines"] = TRAIN_LINES if name == "train" else EVAL_LINES
    if task.get("bpe"):
        task["bpe"]["merges"] = BPE_MERGES
    if task.get("vocab", {}).get("words"):
        task["vocab"]["words"] = WORD_VOCAB
    task["estimate"] = {**task.get("estimate", {}), "train_pairs": rehearsal_pairs(task)}


def keep_warmup_side(real: dict, out: dict, name: str) -> None:
    """The rehearsal's average starts inside its warm-up iff the real run's does."""
    real_e, small_e = grid.experiment(real, name), grid.experiment(out, name)
    small = budget(out, name)
    real_first, small_first = averaged_from(real_e, budget(real, name)), averaged_from(small_e, small)
    warmup, real_warmup = small_e["train"].get("warmup_updates") or 0, real_e["train"].get("warmup_updates") or 0
    if real_first is None or small_first is None or not warmup or small.updates is None:
        return
    train = out["experiments"][name]["train"]
    if real_first >= real_warmup and small_first < warmup:
        train["warmup_updates"] = max(1, math.floor(small_first))
    elif real_first < real_warmup and small_first >= warmup:
        train["warmup_updates"] = min(math.floor(small_first) + 1, math.ceil(small.updates) - 1)


def rehearsal_pairs(task: dict) -> int:
    """Training pairs the rehearsal expects (cleaning drops a few; a hold-out takes every k-th)."""
    hold_out = task["splits"].get("valid", {}).get("hold_out_every")
    return int(TRAIN_LINES * 0.95 * (1 - 1 / hold_out if hold_out else 1))


def shrink_experiment(real: dict, name: str, spec: dict, task: dict) -> dict:
    """Shrink one experiment in place; returns what the summary compares (the real run's estimated epochs and
    the rehearsal's own epoch size)."""
    spec["arch"] = {**spec.get("arch", {}), **TINY_ARCH}
    if spec["model"] == "mlrf":
        spec["arch"].update(TINY_FUSION)
    b = budget(real, name)
    train = {**real.get("defaults", {}).get("train", {}), **spec.get("train", {})}
    if b.epochs is None or b.updates_per_epoch is None:
        return {"real": None}
    real_per_epoch = b.updates_per_epoch
    update_freq = train.get("update_freq", TRAIN_DEFAULTS.update_freq)
    pairs = task["estimate"]["train_pairs"]
    target = max(2, min(UPDATES_PER_EPOCH, BATCHES_PER_EPOCH // update_freq))
    sentences = max(1, pairs // (target * update_freq))  # per batch
    per_epoch = max(1, pairs // sentences // update_freq)  # the rehearsal's updates per epoch

    def updates(real_updates: float, mid_epoch: bool = False) -> int:
        n = max(1, round(squeeze(real_updates / real_per_epoch) * per_epoch))
        if mid_epoch and n % per_epoch == 0:
            n += 1 if per_epoch > 1 else 0  # one update per epoch cannot end mid-epoch
        return n

    new = {"max_minutes": 0}
    scale = sentences / (train.get("max_sentences") or sentences)  # RestartAdam's batch keeps its ratio
    if train.get("max_sentences"):
        new["max_sentences"] = sentences
    if train.get("max_tokens"):  # both limits: batches of `sentences`, the token limit exercised but loose
        new.update(max_tokens=sentences * 256, max_sentences=sentences)
    if train.get("restart_max_sentences"):
        new["restart_max_sentences"] = max(1, round(train["restart_max_sentences"] * scale))
    if train.get("restart_max_tokens"):
        new["restart_max_tokens"] = sentences * 256
    if train.get("max_update"):
        new["max_update"] = updates(train["max_update"], mid_epoch=b.ends_mid_epoch)
    for key in ("warmup_updates", "total_num_update", "lr_period_updates", "save_interval_updates"):
        if train.get(key):
            new[key] = updates(train[key])
    for key in ("max_epoch", "restart_after_epochs", "restart_epochs", "patience"):
        if train.get(key):
            new[key] = squeeze_count(train[key])
    for key in ("keep_last_epochs", "keep_interval_updates"):
        if train.get(key):
            new[key] = squeeze_count(train[key], down=True)
    if new.get("warmup_updates") and new.get("max_update") and train["warmup_updates"] < train["max_update"]:
        new["warmup_updates"] = min(new["warmup_updates"], new["max_update"] - 1)  # keep "warm-up < run"
    spec["train"] = {**spec.get("train", {}), **new}
    average = spec.get("average", real.get("defaults", {}).get("average"))
    if average:
        spec["average"] = {**average, "num": squeeze_count(average.get("num", AVERAGE_DEFAULTS.num), down=True)}
    return {
        "real": {
            "epochs": b.epochs,
            "ends_mid_epoch": b.ends_mid_epoch,
            "updates": b.updates,
            "bounded_by": b.bounded_by,
        },
        "updates_per_epoch": per_epoch,
        "sentences_per_batch": sentences,
    }
