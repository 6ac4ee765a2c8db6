"""The training settings (a config's `train:` section), importable without torch: a workflow driver that has no
torch checks a config's settings with this class. The trainer itself is loop.py."""

from __future__ import annotations

from dataclasses import dataclass

from .. import UserError
from ..settings import AMP_CHOICES, Settings, setting

CUDA_GRAPHS_CHOICES = ("auto", "off", "emulated")
AUTO_GROWTH = 1.1  # bucket_growth_factor's advised value, which `auto` takes where the updates replay as graphs


@dataclass
class TrainConfig(Settings):
    key_noun = "training setting"

    max_tokens: int | None = setting(4096, ge=1)
    max_sentences: int | None = setting(None, ge=1)
    update_freq: int = setting(1, ge=1)
    # merge each update's batches into passes of up to this many padded tokens (fewer, larger forward/backward
    # passes on a GPU that holds more than max_tokens; the update's sentences and tokens unchanged); 0 = off, one
    # pass per batch as the papers' GPUs ran them
    micro_batch_tokens: int = setting(0, ge=0)
    # fixed batch shapes, so that a GPU update can be captured as a CUDA graph or compiled once per shape: lengths
    # padded up to buckets that grow by this factor, each a multiple of seq_len_multiple, and rows fixed per bucket
    # (max_tokens // the longer side's bucket, capped by max_sentences; missing rows are dummies that count for
    # nothing: data/batch_shapes.py); 0 = off, each batch padded to its own longest sentences as in fairseq. 1.1
    # (AUTO_GROWTH): 48 buckets up to 1,024 tokens (at most 3 shapes each), 6-10% of the token slots padding and
    # sentences per update within 4% of fairseq's batches on Multi30k and on IWSLT14's lengths (docs/benchmarks.md).
    # auto = 1.1 where the updates will replay as CUDA graphs (one CUDA GPU, `cuda_graphs: auto`, a precision they
    # take, a model whose loss fixed shapes leave alone, no micro_batch_tokens), 0 elsewhere: the CPU trains in
    # fairseq's batches (update_batches.growth_for_run)
    bucket_growth_factor: float | str = "auto"
    # 2, as MLPerf's Transformer: NMT sentences are short, and 8 pads a 9-token sentence to 16 (on Multi30k a fifth
    # of the token slots would be padding, against 7% with 2)
    seq_len_multiple: int = setting(2, ge=1)
    # leave out training pairs with more subword units on either side (0 = keep all)
    skip_longer_than: int = setting(0, ge=0)
    lr: float = setting(5e-4, gt=0)  # peak lr (inverse_sqrt) or the scale in front of d^-0.5 (noam)
    lr_scheduler: str = "inverse_sqrt"  # inverse_sqrt | noam | polynomial_decay | cosine | fixed
    total_num_update: int = setting(0, ge=0)  # polynomial_decay: lr reaches end_learning_rate here (fairseq's name)
    end_learning_rate: float = setting(0.0, ge=0)
    min_lr: float = setting(0.0, ge=0)  # cosine: the floor of each period (fairseq's --min-lr)
    lr_period_updates: int = setting(0, ge=0)  # cosine: period after warm-up (fairseq's name; Wu et al. 2019: 20,000)
    warmup_updates: int = setting(4000, ge=0)
    warmup_init_lr: float = setting(1e-7, ge=0)
    adam_betas: tuple[float, float] = setting((0.9, 0.98), ge=0, lt=1)
    adam_eps: float = setting(1e-9, gt=0)
    weight_decay: float = setting(0.0, ge=0)
    clip_norm: float = setting(0.0, ge=0)  # 0 = no clipping
    label_smoothing: float = setting(0.1, ge=0, lt=1)
    max_update: int = setting(0, ge=0)  # 0 = no limit
    max_epoch: int = setting(0, ge=0)
    max_minutes: float = setting(0.0, ge=0)  # wall-clock training budget (resumes keep counting)
    patience: int = setting(0, ge=0)  # epochs without a better validation score before stopping; 0 = off
    early_stop_metric: str = "loss"  # loss | bleu (beam search on the validation set each epoch: slower)
    # last | best: which weights become model.pt. best = the epoch early stopping judged best (fairseq's
    # checkpoint_best.pt), so that a run stopped by patience decodes the model it selected, not the one after it
    final_model: str = "last"
    valid_beam: int = setting(1, ge=1)  # beam size for validation BLEU
    # validation BLEU at every validation (epoch ends and validate_interval_updates alike): beam search of the
    # validation set with valid_beam, BLEU over subword units (to follow and compare runs, not comparable with test
    # BLEU), a metrics.csv column (valid_bleu), a TensorBoard curve and the validation_curves figure's `metric: bleu`;
    # slower validations, the same weights. early_stop_metric: bleu computes it too, and also selects by it
    valid_bleu: bool = False
    restart_after_epochs: int = setting(0, ge=0)  # RestartAdam: 0 = off
    restart_lr: float = setting(5e-5, gt=0)
    restart_max_sentences: int | None = setting(None, ge=1)
    restart_max_tokens: int | None = setting(None, ge=1)
    restart_epochs: int = setting(0, ge=0)
    save_interval_updates: int = setting(0, ge=0)  # 0 = only at epoch ends
    # also refresh checkpoint_last.pt (the resume point, not an averaging candidate) after this many minutes, so
    # that a hard kill (kill -9, node failure, OOM, SIGKILL after SLURM's grace period) loses at most this; 0 = off.
    # 5, not an epoch's worth: a demo epoch (~470 updates) takes minutes on a CPU, a full-scale one hours. The
    # writer thread writes it from a CPU copy, so training waits only for the copy; and as a default, not a config
    # value, it changes no run's Snakemake params: finished runs stay finished.
    save_interval_minutes: float = setting(5.0, ge=0)
    keep_interval_updates: int = setting(10, ge=0)
    keep_last_epochs: int = setting(10, ge=0)
    # auto | none | bf16 | bf16-weights | fp16: auto = bf16 (autocast, or bf16 weights with fp32 masters, whichever a
    # probe of the model finds faster) on bf16 GPUs and on CPUs with native bf16 where it is faster than fp32 (else
    # TF32 / fp32); fp16 + loss scaling on older GPUs, fp32 elsewhere (precision.py); none = fp32
    amp: str = "auto"
    # auto | off | emulated: auto = each update shape captured as a CUDA graph at its second update and replayed
    # from then on, on one CUDA GPU with fixed batch shapes (bucket_growth_factor auto or 1.1) in fp32, bf16 (graphs.py)
    # emulated = the same bookkeeping without graphs on any device, the update's Python replayed (what the tests run)
    cuda_graphs: str = "auto"
    # the model's forward and backward compiled by torch.compile (Inductor: its element-wise work fused), once at the
    # first update and once at the first validation; off until measured to pay for a run (training/compiler.py)
    compile: bool = False
    tf32: bool = True  # fp32 on CUDA: TF32 tensor-core matmuls (fairseq's and PyTorch's Ampere+ practice)
    # updates in a row with a non-finite loss or gradient norm that are skipped before the run stops with an error
    max_nonfinite_updates: int = setting(8, ge=1)
    log_interval: int = setting(50, ge=1)
    # also validate every this many updates within an epoch (a metrics.csv row each, for the accuracy curves;
    # early stopping and the best model still judge epoch ends only); 0 = at epoch ends only
    validate_interval_updates: int = setting(0, ge=0)
    seed: int = setting(1, ge=0)

    def decided_growth(self) -> float:
        """bucket_growth_factor as the run trains with it, once `auto` is decided (update_batches.growth_for_run)."""
        assert not isinstance(self.bucket_growth_factor, str), "bucket_growth_factor auto: decide it for the run first"
        return float(self.bucket_growth_factor)

    def check(self) -> None:
        if self.lr_scheduler not in ("inverse_sqrt", "noam", "polynomial_decay", "cosine", "fixed"):
            raise UserError(
                f"lr_scheduler={self.lr_scheduler!r}; expected inverse_sqrt, noam, polynomial_decay, cosine or fixed"
            )
        if self.lr_scheduler == "cosine" and not self.lr_period_updates:
            raise UserError("lr_scheduler=cosine needs lr_period_updates")
        if self.lr_scheduler == "polynomial_decay" and not self.total_num_update:
            raise UserError("lr_scheduler=polynomial_decay needs total_num_update")
        if self.early_stop_metric not in ("loss", "bleu"):
            raise UserError(f"early_stop_metric={self.early_stop_metric!r}; expected loss or bleu")
        if self.final_model not in ("last", "best"):
            raise UserError(f"final_model={self.final_model!r}; expected last or best")
        growth = self.bucket_growth_factor
        if growth != "auto" and (isinstance(growth, str) or growth < 0 or 0 < growth < 1):
            raise UserError(
                f"bucket_growth_factor={growth!r}; expected auto, 0 (off) or at least 1 (1.1: buckets 10% apart)"
            )
        if growth != "auto" and growth and self.micro_batch_tokens:
            raise UserError(
                f"bucket_growth_factor={growth:g} with micro_batch_tokens={self.micro_batch_tokens}: merged passes "
                f"would leave the fixed shapes; set one of them to 0"
            )
        if self.cuda_graphs not in CUDA_GRAPHS_CHOICES:
            raise UserError(f"cuda_graphs={self.cuda_graphs!r}; expected {', '.join(CUDA_GRAPHS_CHOICES)}")
        if self.amp not in AMP_CHOICES:
            raise UserError(f"amp={self.amp!r}; expected {', '.join(AMP_CHOICES)}")
        if not (self.max_update or self.max_epoch or self.max_minutes):
            raise UserError(
                "no training budget: set at least one of max_update, max_epoch, max_minutes (`lwnmt "
                "train --max-update N` or `--max-epoch N`, with `--patience N` for early stopping, as "
                "config.yaml's defaults do: max_epoch 100, patience 10)"
            )


@dataclass
class AverageConfig(Settings):
    """A config's `average:` (null: decode model.pt, the weights `final_model` names): the last `num` checkpoints,
    by epoch or by update, as fairseq's average_checkpoints.py takes them."""

    key_noun = "averaging setting"

    BY = ("epoch", "update")

    num: int = setting(10, ge=1)
    by: str = "epoch"  # one of BY

    def check(self) -> None:
        if self.by not in self.BY:
            raise UserError(f"by={self.by!r}; expected epoch or update")


# What a run does where its config is silent: read here by what estimates a run before it starts (budgets, the
# rehearsal's shrinking, the workflow's averaging step), so that each default is spelt once.
TRAIN_DEFAULTS, AVERAGE_DEFAULTS = TrainConfig(), AverageConfig()
