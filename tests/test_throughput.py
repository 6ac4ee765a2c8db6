"""The trainer keeps the device busy: batches collated ahead on a thread and copied without waiting, updates
queued without waiting for the device (their numbers read one update late), checkpoints written off the training
thread from a copy, an update's batches merged into fewer passes with the same loss and gradients for every model
family. Every GPU branch runs here on the CPU."""

import math
import sys
import threading
import time

import numpy as np
import pytest
import torch
from conftest import load_benchmark, toy_spec

from layerwise_nmt import UserError
from layerwise_nmt.training import loop as training, update_batches
from layerwise_nmt.training.checkpoint import LAST, load, resume_key
from layerwise_nmt.data.batching import ParallelData, Prefetcher, make_batches, merge_batches
from layerwise_nmt.data.vocab import load_pair
from layerwise_nmt.models import build
from layerwise_nmt.training.precision import Precision
from layerwise_nmt.training.loop import TrainConfig, start_run, update_step, accumulate, train
from layerwise_nmt.training.update_batches import check_merging, rank_batches

CPU = torch.device("cpu")
OURS = str(update_batches.__file__).rsplit("/", 1)[0]
gpu_check = load_benchmark("gpu_check")


def no_dropout_spec(**train) -> dict:
    spec = toy_spec(**train)
    return {**spec, "arch": {**spec["arch"], "dropout": 0.0}}


def start(toy_data, save_dir, **train):
    spec = no_dropout_spec(**train)
    torch.manual_seed(1)
    cfg = TrainConfig.from_dict({**spec["train"], "max_update": 100})
    return start_run(
        spec,
        cfg,
        dict(zip(("de", "en"), load_pair(toy_data, "de", "en"), strict=True)),
        save_dir,
        CPU,
        Precision("none", "none", "fp32", "cpu"),
    )


# ---------------------------------------------------------------------------------------------------------------
# Batches ahead of the step


def test_training_batches_are_collated_off_the_training_thread(toy_data, tmp_path, monkeypatch):
    calls = []
    real = update_batches.collate

    def recorded(*args, **kwargs):
        calls.append((sys._getframe(1).f_code.co_name, threading.current_thread() is threading.main_thread()))
        return real(*args, **kwargs)

    monkeypatch.setattr(update_batches, "collate", recorded)
    train(no_dropout_spec(max_update=4), str(toy_data), "de", "en", str(tmp_path / "run"))
    for_updates = [on_main for caller, on_main in calls if caller not in ("evaluate", "valid_bleu")]
    assert len(for_updates) >= 4 and not any(for_updates)


def test_the_prefetcher_runs_ahead_in_order_and_stops_when_left():
    made = []

    def make(key):
        made.append(key)
        return key * 10

    with Prefetcher(make, range(100), depth=2) as ahead:
        items = iter(ahead)
        assert next(items) == (0, 0)
        deadline = time.time() + 10
        while len(made) < 3 and time.time() < deadline:  # 1 and 2 made while the consumer holds 0
            time.sleep(0.01)
        assert made[:3] == [0, 1, 2]
        assert [next(items) for _ in range(3)] == [(1, 10), (2, 20), (3, 30)]
    assert not ahead._thread.is_alive() and len(made) < 10  # left early: the thread stopped, not at key 99

    def broken(key):
        if key == 2:
            raise OSError("disk gone")
        return key

    with Prefetcher(broken, range(5)) as ahead, pytest.raises(OSError, match="disk gone"):
        assert [key for key, _ in ahead] == [0, 1]


def test_batches_are_pinned_for_a_gpu_only(toy_data, monkeypatch):
    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned.append(self.shape) or self)
    data = ParallelData(toy_data, "train", "de", "en")
    order = make_batches(data.src.sizes, data.tgt.sizes, 60, None, 1)[:4]
    assert len(rank_batches(data, order, 4, 0, CPU, 0)) == 4 and not pinned
    assert len(rank_batches(data, order, 4, 0, torch.device("cuda"), 0)) == 4 and len(pinned) == 12


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_an_update_makes_no_blocking_copy_to_the_device(toy_data, tmp_path, monkeypatch, fused):
    """A blocking host-to-device copy (`.to(device)`, `torch.tensor(..., device=)`) waits for the GPU's stream
    to drain: the update's copies are non_blocking, its token count a Python number, its lr filled in place."""
    run = start(toy_data, tmp_path / "run")
    if fused:
        run.optimizer = training.adam(run.model, run.cfg, fused=True)
    data = ParallelData(toy_data, "train", "de", "en")
    micro = rank_batches(data, make_batches(data.src.sizes, data.tgt.sizes, 60, None, 1)[:3], 3, 0, CPU, 0)
    blocking = []
    real_to, real_tensor = torch.Tensor.to, torch.tensor

    def to(self, *args, **kwargs):
        if sys._getframe(1).f_code.co_filename.startswith(OURS) and not kwargs.get("non_blocking"):
            blocking.append(f"to in {sys._getframe(1).f_code.co_name}")
        return real_to(self, *args, **kwargs)

    def tensor(*args, **kwargs):
        if sys._getframe(1).f_code.co_filename.startswith(OURS) and kwargs.get("device") is not None:
            blocking.append(f"torch.tensor in {sys._getframe(1).f_code.co_name}")
        return real_tensor(*args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch, "tensor", tensor)
    assert update_step(run, run.model, micro, CPU, lambda: torch.autocast("cpu", enabled=False)) is not None
    assert blocking == []


# ---------------------------------------------------------------------------------------------------------------
# Updates queued without waiting for the device

# Tensor methods that make the host wait for a CUDA tensor's value
SYNCS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")


def as_on_cuda(monkeypatch, amp: str) -> None:
    """`lwnmt train` with CUDA's optimizer (fused AdamW, on the CPU's fused kernel) and the precision `amp`."""
    real_adam = training.adam
    monkeypatch.setattr(training, "adam", lambda model, cfg, fused=None: real_adam(model, cfg, fused=True))
    precision = Precision(amp, "auto", "the CUDA branch, run on the CPU by the tests", "cpu")
    monkeypatch.setattr(training, "resolve", lambda *args, **kwargs: precision)


@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"])
def test_the_device_paths_updates_never_wait_for_the_device(toy_data, tmp_path, monkeypatch, amp):
    """Each read of a CUDA tensor waits for every kernel queued before it. With CUDA's optimizer an update reads
    nothing back while it is queued (its lr and its skip are device tensors, one of them non-finite here); its
    numbers are read once, after the next update is queued, and the last one's before the run goes on to what
    needs them (the stop, its checkpoint, validation). Every such call on the training thread from the first update
    to the last one's read is counted, in our code and PyTorch's alike."""
    as_on_cuda(monkeypatch, amp)
    real_update, real_accumulate = training.update_step, training.accumulate
    events, queued, attempts = [], {}, {"n": 0}

    def update(*args, **kwargs):
        events.append(("queue", len(queued) + 1))
        pending = real_update(*args, **kwargs)
        numbers = getattr(pending, "stats", pending)
        queued[id(numbers)] = (len(queued) + 1, numbers)  # held: no other tensor gets its id
        return pending

    def accumulate(model, *args, **kwargs):  # the 5th update's gradient overflows
        sums = real_accumulate(model, *args, **kwargs)
        attempts["n"] += 1
        if attempts["n"] == 5:
            next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = math.inf
        return sums

    for name in SYNCS:
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            if events and threading.current_thread() is threading.main_thread():
                events.append(("read", queued[id(self)][0]) if id(self) in queued else (_name, None))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    monkeypatch.setattr(training, "update_step", update)
    monkeypatch.setattr(training, "accumulate", accumulate)
    progress = train(no_dropout_spec(max_update=12, max_tokens=60, amp=amp), str(toy_data), "de", "en", str(tmp_path))
    assert progress["update"] == 12 and progress["skipped_updates"] == 1 and len(queued) == 13
    late = [event for i in range(2, 14) for event in (("queue", i), ("read", i - 1))]
    assert events[: 2 * 13] == [("queue", 1), *late, ("read", 13)]


def test_the_lr_after_an_unread_skipped_update_retries_its_number():
    """The schedule counts the updates taken: queued behind one not yet read, an update has the next number's lr,
    or, where that one turns out skipped, the same number's; chosen on the device from its flag."""
    from layerwise_nmt.training.deferred import Pending, set_lr

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0, fused=True)
    for skipped, expected in ((0.0, 0.5), (1.0, 0.25)):
        before = Pending(torch.tensor([0.0] * 6 + [skipped], dtype=torch.float64))
        set_lr(optimizer, 0.5, 0.25, before)
        lr = optimizer.param_groups[0]["lr"]
        assert isinstance(lr, torch.Tensor) and lr.dtype == torch.float32 and float(lr) == expected
        before.read()
        set_lr(optimizer, 0.5, 0.25, before)  # read already: chosen on the host
        assert optimizer.param_groups[0]["lr"] is lr and float(lr) == expected
    foreach = torch.optim.AdamW(model.parameters(), lr=1.0)
    set_lr(foreach, 0.5, 0.25, None)
    assert foreach.param_groups[0]["lr"] == 0.5  # a Python number, as the foreach path needs without capturable


def test_the_device_path_resumes_bit_for_bit(toy_data, tmp_path, monkeypatch):
    """Checkpoints (every 4 updates, at epoch ends, at the stop) and validations (every 3) of the device path count
    every update whose weights they hold: a run stopped at update 6 and resumed ends where a straight one does."""
    as_on_cuda(monkeypatch, "none")
    spec = no_dropout_spec(max_update=14, save_interval_updates=4, validate_interval_updates=3)
    train(spec, str(toy_data), "de", "en", str(tmp_path / "straight"))
    train({**spec, "train": {**spec["train"], "max_update": 6}}, str(toy_data), "de", "en", str(tmp_path / "resumed"))
    assert load(tmp_path / "resumed" / LAST)["progress"]["update"] == 6
    train(spec, str(toy_data), "de", "en", str(tmp_path / "resumed"))
    a, b = (load(tmp_path / run / LAST) for run in ("straight", "resumed"))
    assert a["progress"]["epoch"] > 1  # an epoch's end on the way
    for key in ("update", "epoch", "next_batch", "epoch_stats", "history", "target_tokens", "sentences"):
        if key == "history":
            a["progress"][key] = [{k: v for k, v in row.items() if k != "minutes"} for row in a["progress"][key]]
            b["progress"][key] = [{k: v for k, v in row.items() if k != "minutes"} for row in b["progress"][key]]
        assert a["progress"][key] == b["progress"][key], key
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints off the training thread


def test_checkpoints_are_written_off_the_training_thread_from_a_copy(toy_data, tmp_path, monkeypatch):
    run = start(toy_data, tmp_path / "run")
    release, writers = threading.Event(), []
    real_save = torch.save

    def slow_save(*args, **kwargs):  # a slow disk: the write waits until the test lets it go (or 5 s)
        writers.append(threading.current_thread() is threading.main_thread())
        release.wait(timeout=5)
        return real_save(*args, **kwargs)

    monkeypatch.setattr(torch, "save", slow_save)
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    began = time.perf_counter()
    run.save(LAST, background=True)
    returned = time.perf_counter() - began
    with torch.no_grad():  # training goes on while the write waits
        for p in run.model.parameters():
            p.add_(1.0)
    assert returned < 2 and not (tmp_path / "run" / LAST).exists()
    release.set()
    run.flush()
    assert writers == [False]
    saved = load(tmp_path / "run" / LAST)["model"]
    assert all(torch.equal(saved[k], v) for k, v in before.items())  # the state at save(), not after

    release.clear()
    threading.Timer(1.0, release.set).start()
    began = time.perf_counter()
    run.save(LAST)  # by default (a stopping process): written before save() returns
    assert time.perf_counter() - began >= 0.9 and writers[-1] is True
    assert torch.equal(load(tmp_path / "run" / LAST)["model"]["output.weight"], run.model.state_dict()["output.weight"])


def test_a_tied_matrix_is_copied_once(toy_data, tmp_path):
    from layerwise_nmt.training.checkpoint import snapshot

    state = start(toy_data, tmp_path / "run").model.state_dict()
    tied = [k for k in state if state[k].data_ptr() == state["output.weight"].data_ptr()]
    assert len(tied) >= 2  # toy arch: tie all
    copy = snapshot(state)
    assert len({copy[k].data_ptr() for k in tied}) == 1 and copy[tied[0]].data_ptr() != state[tied[0]].data_ptr()


# ---------------------------------------------------------------------------------------------------------------
# Merged micro-batches


def test_merge_batches_keeps_every_sentence_once_within_the_budget():
    rng = np.random.RandomState(0)
    sizes = rng.randint(2, 60, 400)
    batches = make_batches(sizes, sizes, 200, None, 1)
    rng.shuffle(batches)
    group = batches[:16]
    for budget in (150, 800, 5000):
        merged = merge_batches(group, sizes, budget)
        assert sorted(np.concatenate([ids for ids, _ in merged])) == sorted(np.concatenate(group))
        assert sum(parts for _, parts in merged) == len(group)
        assert all(len(ids) * sizes[ids].max() <= budget or parts == 1 for ids, parts in merged)
    assert len(merge_batches(group, sizes, 5000)) < len(merge_batches(group, sizes, 800)) < len(group)
    assert len(merge_batches(group, sizes, 150)) == len(group)  # every batch already fills the budget


# every dropout off (the conv backbones drop kernel weights by default): the same arithmetic in both runs
NO_DROPOUT = {
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "weight_dropout": 0.0,
    "input_dropout": 0.0,
}


def family_updates(toy_data, name: str, arch: dict, budget: int):
    """(loss sums, gradients) of one update on 4 toy batches of different lengths, unmerged and merged."""
    data = ParallelData(toy_data, "train", "de", "en")
    vocab = len(load_pair(toy_data, "de", "en")[0])
    batches = make_batches(data.src.sizes, data.tgt.sizes, 40, None, 1)
    group = [batches[i] for i in (0, len(batches) // 3, 2 * len(batches) // 3, len(batches) - 1)]
    model_name, extra = gpu_check.FAMILIES[name]
    results = []
    for micro_batch_tokens in (0, budget):
        torch.manual_seed(0)
        model = build(
            model_name, {**gpu_check.TINY, **NO_DROPOUT, **extra, **arch, "src_vocab": vocab, "tgt_vocab": vocab}
        )
        cfg = TrainConfig.from_dict({"max_update": 1, "micro_batch_tokens": micro_batch_tokens})
        micro = rank_batches(data, group, 4, micro_batch_tokens, CPU, 0)
        assert len(micro) == (4 if not micro_batch_tokens else 2)
        stats = accumulate(model.train(), micro, cfg, CPU, lambda: torch.autocast("cpu", enabled=False))
        results.append(
            (
                {k: float(v) for k, v in stats.items()},
                {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            )
        )
    return results


def merging_budget(toy_data) -> int:
    """A budget that merges the 4 batches of `family_updates` into 2 passes (shortest two, longest two)."""
    data = ParallelData(toy_data, "train", "de", "en")
    batches = make_batches(data.src.sizes, data.tgt.sizes, 40, None, 1)
    group = [batches[i] for i in (0, len(batches) // 3, 2 * len(batches) // 3, len(batches) - 1)]
    for budget in range(40, 400):
        if len(merge_batches(group, data.sizes, budget)) == 2:
            return budget
    raise AssertionError("no budget merges the toy batches into 2 passes")


@pytest.mark.parametrize("name", list(gpu_check.FAMILIES))
def test_merged_and_unmerged_updates_give_the_same_loss_and_gradients(toy_data, name):
    budget = merging_budget(toy_data)
    arch = {"diversity": 0.0} if name == "deep" else {}  # its diversity term is refused (next test)
    (unmerged, grads), (merged, merged_grads) = family_updates(toy_data, name, arch, budget)
    assert merged["ntokens"] == unmerged["ntokens"] and merged["correct"] == unmerged["correct"]
    for key in ("loss", "nll"):
        assert merged[key] == pytest.approx(unmerged[key], rel=1e-5), key
    assert grads.keys() == merged_grads.keys()
    for param, grad in grads.items():
        assert torch.allclose(merged_grads[param], grad, rtol=1e-4, atol=1e-6), param


def test_a_per_pass_auxiliary_loss_refuses_merging(toy_data):
    model_name, extra = gpu_check.FAMILIES["deep"]
    assert extra["diversity"] > 0
    model = build(model_name, {**gpu_check.TINY, **extra, "src_vocab": 40, "tgt_vocab": 40})
    with pytest.raises(
        UserError, match="micro_batch_tokens=4096: model DeepTransformer with diversity=1.0 .*set micro_batch_tokens: 0"
    ):
        check_merging(model, TrainConfig.from_dict({"max_update": 1, "micro_batch_tokens": 4096}))
    check_merging(model, TrainConfig.from_dict({"max_update": 1}))  # off: fine
    with pytest.raises(UserError, match="per-pass auxiliary loss"):  # and the update itself, as a backstop
        family_updates(toy_data, "deep", {}, merging_budget(toy_data))


def test_merged_training_follows_the_unmerged_run_and_resumes_across_the_setting(toy_data, tmp_path):
    """The trainer with micro_batch_tokens: the same updates (tokens, positions, loss) and, within fp32 rounding,
    the same weights after 6 updates of 4 batches; the setting may change between a stop and a resume. adam_eps
    1e-3: Adam's default 1e-9 turns a gradient that is rounding noise in both runs (the key biases', which softmax
    ignores) into a step of ±lr either way, larger than any rounding; with 1e-3 such a step is negligible. amp: none
    (fp32): in bf16 a pass's shape changes what is rounded where, and the runs agree only to bf16's precision."""
    runs = {}
    for label, budget in (("unmerged", 0), ("merged", 800)):
        spec = no_dropout_spec(
            max_update=6, update_freq=4, max_tokens=100, adam_eps=1e-3, amp="none", micro_batch_tokens=budget
        )
        train(spec, str(toy_data), "de", "en", str(tmp_path / label))
        runs[label] = load(tmp_path / label / LAST)
    a, b = runs["unmerged"], runs["merged"]
    for key in ("update", "epoch", "next_batch"):
        assert a["progress"][key] == b["progress"][key], key
    loss, _, _, tokens = a["progress"]["epoch_stats"]
    assert b["progress"]["epoch_stats"][3] == tokens  # target tokens of the epoch's updates
    assert b["progress"]["epoch_stats"][0] == pytest.approx(loss, rel=1e-5)  # and their summed loss
    for key, tensor in a["model"].items():
        assert torch.allclose(b["model"][key], tensor, rtol=1e-4, atol=1e-6), key

    key = resume_key(no_dropout_spec(max_update=6, update_freq=4, max_tokens=100, adam_eps=1e-3, amp="none"))
    assert (
        resume_key(
            no_dropout_spec(
                max_update=6, update_freq=4, max_tokens=100, adam_eps=1e-3, amp="none", micro_batch_tokens=800
            )
        )
        == key
    )
    spec = no_dropout_spec(max_update=8, update_freq=4, max_tokens=100, adam_eps=1e-3, amp="none", micro_batch_tokens=0)
    train(spec, str(toy_data), "de", "en", str(tmp_path / "merged"))  # resumed, not set aside
    assert load(tmp_path / "merged" / LAST)["progress"]["update"] == 8
    assert not list(tmp_path.glob("merged.superseded-*"))
