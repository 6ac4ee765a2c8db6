"""`lwnmt plan`: what each table costs to reproduce, in GPU-hours, before anything runs.

    GPU-hours = seeds × 6 × N × (source + target tokens trained on) / sustained FLOP/s / 3600

N is the model's exact parameter count (in closed form from its settings: models/sizes.py), with the vocabulary
sizes of the task's `estimate` (or of its prepared dictionaries). Tokens trained on: updates × max_tokens ×
update_freq for update-bounded runs (max_tokens counts target tokens; the source side adds about as many), or
epochs × training pairs × subwords per sentence × 2 for epoch-bounded runs (an upper bound when early stopping
may end them sooner: marked ≤). Decoding, validation and data preparation are not counted (small beside training).
Each experiment is priced in the precision it will train in on the GPU named (`--gpu`, default A100): `amp: auto`
→ bf16 (fp16 where the GPU has no bf16; a run's own probe may find TF32 faster for a small model, priced as bf16
here), `amp: none` → TF32 tensor cores (fp32 where the row sets `tf32: false` or
the GPU has none). Sustained throughput = the GPU's dense peak in that precision × an assumed model FLOP
utilisation (`--mfu`, default 33%: NVIDIA DeepLearningExamples' fairseq-style Transformer-big in mixed precision,
~82K target tokens/s on one A100; its MLPerf v0.7 submission with fused kernels reached ~41%). Both are stated in
the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import grid
from ..models import sizes as model_sizes
from ..training.config import TRAIN_DEFAULTS
from .budget_checks import budget
from .tasks import SUBWORDS_PER_SENTENCE

DEFAULT_MFU = 0.33  # NVIDIA DeepLearningExamples, Transformer-big AMP on one A100: ~82K target tokens/s ≈ 33% of peak
# A 2-core CPU's sustained rate in this file's counting (6 · N · source + target tokens), from the demo model's
# measured fp32 training rate (docs/benchmarks.md, "The CPU-hours estimate"); fp32: what `amp: auto` picks on most
# CPUs.
CPU_TFLOPS = 0.205
CPU_SIZED_HOURS = 48  # a table a 2-core CPU trains within two days gets a CPU-hours estimate beside its GPU-hours
# Small models keep a GPU far below DEFAULT_MFU (kernel launches and the host, not FLOPs, bound an update): the 6+6
# d=256 study baseline (13,076,480 parameters) trained at 55,028 target tokens/s on an H200 (docs/study/cpu6/), 6 ·
# N · (source + target) ≈ 8.6 TFLOP/s, under 1% of its bf16 peak. Below SMALL_MODEL_PARAMS a GPU-hours estimate is
# a lower bound, marked ≥.
SMALL_MODEL_PARAMS = 30_000_000
SMALL_MODEL_PARAMS_MEASURED, SMALL_MODEL_TARGET_TOKENS_PER_S, SMALL_MODEL_GPU = 13_076_480, 55_028, "h200"


def small_model_mfu() -> float:
    """The measured utilisation of the small model above: 6 · N · (source + target tokens) per second / peak."""
    flops = 6 * SMALL_MODEL_PARAMS_MEASURED * 2 * SMALL_MODEL_TARGET_TOKENS_PER_S
    return flops / (GPUS[SMALL_MODEL_GPU].bf16 * 1e12)


@dataclass(frozen=True)
class Gpu:
    """A GPU's dense peak TFLOP/s per precision (vendor datasheets, no sparsity); 0 = no hardware support."""

    name: str
    bf16: float
    fp16: float
    tf32: float
    fp32: float

    def precision(self, train: dict) -> str:
        """What a row with these training settings computes in on this GPU (precision.resolve's rules)."""
        amp = train.get("amp", TRAIN_DEFAULTS.amp)
        if amp == "auto":
            amp = "bf16" if self.bf16 else "fp16"
        amp = "bf16" if amp == "bf16-weights" else amp  # the same bf16 matmuls, without autocast's casts
        if amp in ("bf16", "fp16") and getattr(self, amp):
            return amp
        # bf16 without hardware: emulated
        return "tf32" if train.get("tf32", TRAIN_DEFAULTS.tf32) and self.tf32 else "fp32"

    def sustained(self, precision: str, mfu: float) -> float:
        return getattr(self, precision) * mfu


GPUS = {
    "h100": Gpu("NVIDIA H100 SXM", bf16=989, fp16=989, tf32=494, fp32=67),
    "h200": Gpu("NVIDIA H200 SXM", bf16=989, fp16=989, tf32=494, fp32=67),  # H100's compute, more memory
    "a100": Gpu("NVIDIA A100 SXM", bf16=312, fp16=312, tf32=156, fp32=19.5),
    "l40s": Gpu("NVIDIA L40S", bf16=362, fp16=362, tf32=183, fp32=91.6),
    "a10": Gpu("NVIDIA A10", bf16=125, fp16=125, tf32=62.5, fp32=31.2),
    "v100": Gpu("NVIDIA V100 SXM2", bf16=0, fp16=125, tf32=0, fp32=15.7),
    "t4": Gpu("NVIDIA T4", bf16=0, fp16=65, tf32=0, fp32=8.1),
}
DEFAULT_GPU = "a100"


@dataclass(frozen=True)
class Pricing:
    """How GPU-hours are computed: on which GPU, at what fraction of its peak (or a flat rate the user states)."""

    gpu: str = DEFAULT_GPU
    mfu: float = DEFAULT_MFU
    tflops: float | None = None  # a flat sustained bf16/fp16 rate; tf32/fp32 rows scaled by the GPU's peak ratio

    def rate(self, precision: str) -> float:
        gpu = GPUS[self.gpu]
        if self.tflops is None:
            return gpu.sustained(precision, self.mfu)
        mixed = gpu.bf16 or gpu.fp16
        return self.tflops * getattr(gpu, precision) / mixed

    def describe(self) -> str:
        gpu = GPUS[self.gpu]
        rates = ", ".join(f"{p} {self.rate(p):.3g}" for p in ("bf16", "fp16", "tf32", "fp32") if getattr(gpu, p))
        basis = (
            f"{self.mfu:.0%} of its dense peak (--mfu)"
            if self.tflops is None
            else f"{self.tflops:g} TFLOP/s in mixed precision as given (--tflops), other precisions in the ratio of "
            f"its peaks"
        )
        return f"one {gpu.name} (--gpu {self.gpu}) at {basis}: sustained TFLOP/s {rates}"


@dataclass
class Cost:
    experiment: str
    params: int | None
    tokens: float | None  # source + target tokens over the whole run, one seed
    seeds: int
    upper_bound: bool
    note: str = ""
    train: dict = field(default_factory=dict)  # the experiment's training settings: its precision per GPU

    def precision(self, pricing: Pricing) -> str:
        return GPUS[pricing.gpu].precision(self.train)

    @property
    def lower_bound(self) -> bool:
        """A small model: its GPU-hours at --mfu are a lower bound (SMALL_MODEL_PARAMS)."""
        return self.params is not None and self.params < SMALL_MODEL_PARAMS

    def hours(self, pricing: Pricing) -> float | None:
        return self.gpu_hours(pricing.rate(self.precision(pricing)))

    def gpu_hours(self, tflops: float) -> float | None:
        if self.params is None or self.tokens is None:
            return None
        return self.seeds * 6 * self.params * self.tokens / (tflops * 1e12) / 3600

    def cpu_hours(self) -> float | None:
        """Hours on a 2-core CPU at the demo's measured fp32 training rate (CPU_TFLOPS)."""
        return self.gpu_hours(CPU_TFLOPS)


def task_vocab(config: dict, e: dict) -> tuple[int, int] | None:
    estimate = config["tasks"][e["task"]].get("estimate", {})
    vocab = estimate.get("vocab")
    if isinstance(vocab, int):
        return vocab, vocab
    if isinstance(vocab, dict):
        return vocab["src"], vocab["tgt"]
    # the prepared dictionaries: a task that states no vocabulary estimate
    from .parameter_table import vocab_sizes

    return vocab_sizes(e)


def trained_tokens(config: dict, e: dict) -> tuple[float | None, bool, str]:
    """(source + target tokens of one run, whether that is an upper bound, why unknown)."""
    train = e["train"]
    if train.get("max_update"):
        per_update = (train.get("max_tokens") or 0) * train.get("update_freq", TRAIN_DEFAULTS.update_freq)
        if per_update:
            return 2.0 * train["max_update"] * per_update, False, ""
    epochs = (train.get("max_epoch") or 0) + (train.get("restart_epochs") or 0)
    estimate = config["tasks"][e["task"]].get("estimate", {})
    if not epochs:
        return None, False, "no max_update or max_epoch"
    if not estimate.get("train_pairs"):
        return None, False, f"tasks/{e['task']}/estimate has no train_pairs"
    tokens = 2.0 * epochs * estimate["train_pairs"] * estimate.get("subwords_per_sentence", SUBWORDS_PER_SENTENCE)
    return tokens, bool(train.get("patience")), ""


def parameter_count(model: str, settings: dict) -> int | None:
    """The model's exact parameter count, in closed form from its settings (models/sizes.py): no torch, nothing
    built, so that `snakemake -n` prices every training (its priority) in a driver environment without torch."""
    return model_sizes.parameter_count(model, settings)


def experiment_cost(config: dict, name: str, build: bool = False) -> Cost:
    """One experiment's cost. A model of the config's own has no closed form: with `build` (`lwnmt plan`) it is
    counted as built on the meta device, importing its module; without (`snakemake -n`: no torch, no user code)
    its cost is unknown."""
    e = grid.experiment(config, name)
    tokens, bound, why = trained_tokens(config, e)
    sizes = task_vocab(config, e)
    params, note = None, why
    own = (config.get("models") or {}).get(e["model"])
    if sizes is None:
        note = f"tasks/{e['task']}/estimate has no vocab"
    elif own is not None and not build:
        note = f"model {e['model']!r} is counted where it is built (lwnmt plan)"
    else:
        arch = {**e["arch"], "src_vocab": sizes[0], "tgt_vocab": sizes[1]}
        if own is not None:
            from ..models import UserModel, count_built

            params = count_built(
                e["model"], arch, UserModel.from_config(config, e["model"]), f"config key experiments/{name}/arch"
            )
        else:
            params = parameter_count(e["model"], arch)
        note = note if params is not None else f"model {e['model']!r} not implemented"
    return Cost(name, params, tokens, len(e["seeds"]), bound, note, e["train"])


def plan(config: dict) -> list[dict]:
    """One record per targeted table: its rows, how many are ours to run, and their GPU-hours."""
    out = []
    for paper, table in grid.tables(config):
        spec = config["papers"][paper]["tables"][table]
        names = list(dict.fromkeys(row["experiment"] for row in spec["rows"] if "experiment" in row))
        costs = [experiment_cost(config, n, build=True) for n in names]
        blocked = [n for n in names if not grid.experiment_status(config, n).runnable]
        out.append(
            {
                "paper": paper,
                "table": table,
                "rows": len(spec["rows"]),
                "experiments": names,
                "blocked": blocked,
                "costs": costs,
            }
        )
    return out


def cpu_sized(record: dict) -> float | None:
    """A table's CPU-hours (2 cores, fp32) when a CPU trains it within CPU_SIZED_HOURS, else None."""
    hours = [c.cpu_hours() for c in record["costs"]]
    total = sum(h for h in hours if h is not None)
    return total if hours and None not in hours and total <= CPU_SIZED_HOURS else None


def render(records: list[dict], pricing: Pricing = Pricing()) -> str:
    cpu = any(cpu_sized(r) is not None for r in records)  # the column only where some table is CPU-sized
    lines = [
        f"GPU-hours to train every experiment of each table (seeds included) on {pricing.describe()}; each row "
        f"priced in the precision it trains in there (amp: auto = bf16, or fp16 without bf16; amp: none = "
        f"TF32, or fp32 with tf32: false); ≤ = epoch-bounded runs that early stopping may end sooner; ≥ = a "
        f"lower bound: models under {SMALL_MODEL_PARAMS / 1e6:.0f}M parameters run far below --mfu (a 13M-parameter "
        f"6+6 d=256 model measured {small_model_mfu():.1%} of an H200's peak); ~ = both."
        + (
            f" CPU-hours: on 2 cores at the demo's measured fp32 training rate ({CPU_TFLOPS * 1e3:.0f} GFLOP/s: "
            f'docs/benchmarks.md, "The CPU-hours estimate"), for tables a CPU trains within '
            f"{CPU_SIZED_HOURS} hours; decoding and data preparation not counted."
            if cpu
            else ""
        ),
        "",
        f"{'table':<10} {'rows':>4} {'runs':>4} {'GPU-hours':>10}  "
        + (f"{'CPU-hours':>9}  " if cpu else "")
        + f"{'precision':<10} notes",
    ]
    seen: dict[str, Cost] = {}
    for r in records:
        hours = [c.hours(pricing) for c in r["costs"]]
        known = [h for h in hours if h is not None]
        bound = "≤" if any(c.upper_bound for c in r["costs"]) else " "
        on_cpu = cpu_sized(r)
        cpu_column = (f"{bound}{hours_text(on_cpu):>8}  " if on_cpu is not None else f"{'—':>9}  ") if cpu else ""
        if any(c.lower_bound for c in r["costs"]):  # GPU-hours only: the CPU rate was measured on a small model
            bound = "≥" if bound == " " else "~"
        precisions = "+".join(sorted({c.precision(pricing) for c in r["costs"]})) or "—"
        notes = []
        if r["blocked"]:
            notes.append(f"{len(r['blocked'])} need data or code not here yet (lwnmt status)")
        unknown = [c for c, h in zip(r["costs"], hours, strict=True) if h is None]
        if unknown:
            notes.append(f"{len(unknown)} not estimable ({unknown[0].note})")
        total = f"{bound}{hours_text(sum(known))}" if known else "—"
        lines.append(
            f"{r['paper'] + ' ' + r['table']:<10} {r['rows']:>4} {len(r['costs']):>4} {total:>10}  "
            f"{cpu_column}{precisions:<10} {'; '.join(notes)}".rstrip()
        )
        seen.update({c.experiment: c for c in r["costs"]})
    overall = sum(h for c in seen.values() if (h := c.hours(pricing)) is not None)
    lines += [
        "",
        f"all tables: {len(seen)} distinct experiments, {hours_text(overall)} GPU-hours "
        f"(an experiment shared by several tables is counted once)",
    ]
    return "\n".join(lines)


def hours_text(hours: float) -> str:
    if hours < 0.1:  # a CPU-sized table's few GPU-minutes: two significant digits, never 0.0
        return f"{hours:.2g}"
    return f"{hours:,.1f}" if hours < 10 else f"{hours:,.0f}"


def rows(records: list[dict], pricing: Pricing, config: dict) -> list[dict]:
    """Per experiment, for --format csv."""
    out = []
    for r in records:
        for c in r["costs"]:
            b = budget(config, c.experiment)
            out.append(
                {
                    "paper": r["paper"],
                    "table": r["table"],
                    "experiment": c.experiment,
                    "params": c.params,
                    "tokens": c.tokens,
                    "seeds": c.seeds,
                    "upper_bound": c.upper_bound,
                    "lower_bound": c.lower_bound,
                    "gpu": GPUS[pricing.gpu].name,
                    "precision": c.precision(pricing),
                    "sustained_tflops": pricing.rate(c.precision(pricing)),
                    "gpu_hours": c.hours(pricing),
                    "cpu_hours": c.cpu_hours(),
                    "updates": b.updates,
                    "epochs": b.epochs,
                    "problems": "; ".join(b.problems),
                    "note": c.note,
                }
            )
    return out
