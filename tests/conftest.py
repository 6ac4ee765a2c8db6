import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# `amp: auto`'s probe keeps its choices in a cache of the suite's own, fresh for each run of it: no test reads a choice
# measured outside the suite, and none writes into the user's cache.
os.environ["LWNMT_CACHE_DIR"] = tempfile.mkdtemp(prefix="lwnmt-test-cache-")
# Nor a held-out folder of the user's: with one, the study's toy runs would be expected to translate its sets (the
# tests that want one set it themselves).
os.environ.pop("LWNMT_HELDOUT_DIR", None)

# Under pytest-xdist (`make test`: one worker per core) each worker computes on one thread: two workers' PyTorch
# threads on the same cores would wait for each other at every operation; so does every command the tests start
# (OMP_NUM_THREADS is PyTorch's default thread count), unless a test asks for others.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"

# The suite's tiers (pyproject.toml's markers): a test marked system, slurm or gpu keeps its mark; every other test
# is a unit test where its file computes in-process only (the files below), else an integration test.
UNIT_FILES = {
    "test_batch_shapes.py",
    "test_bpe_vocab.py",
    "test_compile.py",
    "test_coordination.py",
    "test_cross_view.py",
    "test_cuda_graphs.py",
    "test_fairseq_parity.py",
    "test_figure_specs.py",
    "test_job_specs.py",
    "test_fusion.py",
    "test_loss.py",
    "test_model.py",
    "test_optimizer.py",
    "test_precision_branches.py",
    "test_progress.py",
    "test_recipes.py",
    "test_score.py",
    "test_settings.py",
    "test_throughput.py",
    "test_tokenize.py",
    "test_validation_interval.py",
}
TIERS = ("unit", "integration", "system", "slurm", "gpu")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker("unit" if item.path.name in UNIT_FILES else "integration")


# The data mirror is the folder LWNMT_DATA_MIRROR names (`make test` passes it on); tests that read it skip without it.
MIRROR = Path(os.environ["LWNMT_DATA_MIRROR"]).resolve() if os.environ.get("LWNMT_DATA_MIRROR") else None
IWSLT_FAIRSEQ = MIRROR / "iwslt14-de-en" / "iwslt14.tokenized.de-en" if MIRROR else None


@pytest.fixture(scope="session")
def mirror() -> Path:
    if MIRROR is None or not MIRROR.is_dir():
        reason = f"no data mirror at {MIRROR}" if MIRROR else "no data mirror: LWNMT_DATA_MIRROR is not set"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the data mirror ({reason})")
        pytest.skip(reason)
    return MIRROR


def default_sigint() -> None:
    """A child's SIGINT as a terminal gives it (`preexec_fn` of a process a test stops with SIGINT): delivered and
    not ignored, whatever the test process's own state. A SIGINT the test process ignores (a job started in the
    background by a non-interactive shell; a stopped training in this process ignores a second one) would be
    inherited by the Snakemake it starts, which then keeps ignoring it, as it must where SIGINT is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def snakemake(
    workdir: Path, *args: str, mirror: Path | None = None, check: bool = True, timeout: int = 600
) -> subprocess.CompletedProcess:
    """Run the project's Snakefile in `workdir` with this interpreter's environment (its bin dir first on PATH)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("LWNMT_DATA_MIRROR", None)
    if mirror is not None:
        env["LWNMT_DATA_MIRROR"] = str(mirror)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "--cores", "2", *args]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )
    return result


TOY_ARCH = {
    "d_model": 32,
    "d_ff": 64,
    "heads": 4,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "tie": "all",
    "dropout": 0.1,
}


def reversal_task(root: Path, words: int, sizes: dict[str, int], lengths: tuple[int, int]) -> Path:
    """A reversal task (each target the source's words in reverse order) over `words` symbols, its splits of
    `sizes` sentences of `lengths` words (low, high exclusive), written as text and binarized like the workflow's
    bin-joint data; the bin-joint folder."""
    from collections import Counter

    import numpy as np

    from layerwise_nmt.data.binarize import binarize
    from layerwise_nmt.data.vocab import Dictionary

    rng = np.random.RandomState(0)
    symbols = [f"w{i}" for i in range(words)]
    (root / "vocab").mkdir(parents=True)
    vocab = Dictionary.build(Counter({w: 1 for w in symbols}))
    vocab.save(root / "vocab" / "dict.joint.txt")
    (root / "bin-joint").mkdir()
    for split, n in sizes.items():
        src = [" ".join(rng.choice(symbols, rng.randint(*lengths))) for _ in range(n)]
        tgt = [" ".join(reversed(s.split())) for s in src]
        for lang, lines in (("de", src), ("en", tgt)):
            path = root / f"{split}.{lang}"
            path.write_text("\n".join(lines) + "\n")
            binarize(str(path), vocab, str(root / "bin-joint" / f"{split}.de-en.{lang}"))
    return root / "bin-joint"


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory) -> Path:
    """A toy reversal task, binarized like the workflow's bin-joint data, for the training tests."""
    return reversal_task(tmp_path_factory.mktemp("toy"), 30, {"train": 240, "valid": 24}, (2, 9))


def toy_spec(**train) -> dict:
    return {
        "model": "transformer",
        "arch": TOY_ARCH,
        "train": {"max_tokens": 200, "lr": 0.003, "warmup_updates": 5, "log_interval": 1000, **train},
    }


def toy_batch(src_vocab: int = 40, tgt_vocab: int = 40):
    """3 sources of 7 ids ending in </s> (sentence 1 right-padded after 5) and 3 decoder inputs of 6 starting with
    </s>, for the model tests."""
    eos, pad = 2, 1
    torch.manual_seed(1)
    src = torch.randint(4, src_vocab, (3, 7))
    src[:, -1] = eos
    src[1, 5:] = pad
    src[1, 4] = eos
    prev = torch.randint(4, tgt_vocab, (3, 6))
    prev[:, 0] = eos
    return src, prev


# The model tests' small models: family → settings (a test's own settings update them)
TINY = {
    "transformer": dict(
        src_vocab=50,
        tgt_vocab=50,
        d_model=32,
        d_ff=64,
        heads=4,
        encoder_layers=2,
        decoder_layers=3,
        dropout=0.0,
        tie="all",
    ),
    "lwc": dict(src_vocab=50, tgt_vocab=50, d_model=32, d_ff=64, heads=4, layers=3, dropout=0.0),
    "cross_view": dict(
        src_vocab=40,
        tgt_vocab=40,
        d_model=16,
        d_ff=32,
        heads=2,
        encoder_layers=3,
        decoder_layers=3,
        dropout=0.0,
        tie="all",
    ),
    "deep": dict(
        src_vocab=40, tgt_vocab=40, d_model=16, d_ff=32, heads=2, encoder_layers=4, decoder_layers=4, dropout=0.0
    ),
    "mlrf": dict(
        src_vocab=40,
        tgt_vocab=30,
        d_model=16,
        d_ff=32,
        heads=2,
        encoder_layers=3,
        decoder_layers=3,
        d_a=24,
        d_f=20,
        dropout=0.0,
    ),
}


def tiny_model(family: str, **settings):
    """A small model of `family` (TINY's settings, updated by `settings`) in eval mode, its weights drawn from
    seed 0."""
    from layerwise_nmt.models import build

    torch.manual_seed(0)
    return build(family, {**TINY[family], **settings}).eval()


def tiny_batch(family: str):
    """toy_batch in the vocabularies of TINY[family]."""
    return toy_batch(src_vocab=TINY[family]["src_vocab"], tgt_vocab=TINY[family]["tgt_vocab"])


def assert_target_prefix_only(model, src, prev, position: int = 4) -> None:
    """Changing target token `position` leaves the outputs at earlier positions unchanged (and changes later ones)."""

    logits = model(src, prev)
    changed = prev.clone()
    changed[:, position] = 9 if int(prev[0, position]) != 9 else 7
    assert torch.allclose(model(src, changed)[:, :position], logits[:, :position], atol=1e-6)
    assert not torch.allclose(model(src, changed)[:, position:], logits[:, position:], atol=1e-4)


def assert_cached_beam_equals_recompute(model, src) -> None:
    """Beam search with the model's incremental state returns the hypotheses and scores of full recomputation."""
    import math

    from layerwise_nmt.inference.decode import BeamConfig, Recompute, beam_search

    for cfg in (
        BeamConfig(beam=4, max_len_a=1.0, max_len_b=4),
        BeamConfig(beam=3, lenpen=0.6, length_penalty="gnmt", max_len_a=0.5, max_len_b=6),
    ):
        cached, full = beam_search(model, src, cfg), beam_search(Recompute(model), src, cfg)
        for a, b in zip(cached, full, strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert all(math.isclose(x.score, y.score, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b, strict=True))


def assert_autoregressive(model, src, prev, position: int = 4) -> None:
    """The decoder contract every model keeps: causal in the target, and cached beam search = recomputation."""
    assert_target_prefix_only(model, src, prev, position)
    assert_cached_beam_equals_recompute(model, src)


def make_tgz(path: Path, members: dict[str, bytes]) -> Path:
    """A .tgz holding `members` ({name: bytes}), for the fetch/extract tests."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def train_command(spec: dict, data: Path, save_dir: Path, *more: str) -> list[str]:
    """`lwnmt train` on the toy de-en data at one thread, as a user starts it; `more` adds options."""
    import json

    return [
        sys.executable,
        "-m",
        "layerwise_nmt",
        "train",
        "--spec",
        json.dumps(spec),
        "--data",
        str(data),
        "--src",
        "de",
        "--tgt",
        "en",
        "--save-dir",
        str(save_dir),
        "--threads",
        "1",
        *more,
    ]


def training_in_the_background(spec: dict, data: Path, tmp_path: Path) -> tuple[subprocess.Popen, list[str], Path]:
    """`lwnmt train` started as a user would, returned once its first epoch checkpoint exists (and a moment more, so
    that the next signal lands mid-epoch): (process with stderr piped, its command, its save dir)."""
    import time

    save_dir = tmp_path / "run"
    cmd = train_command(spec, data, save_dir, "--final", str(tmp_path / "model.pt"))
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (save_dir / "checkpoint1.pt").exists() and time.time() < deadline:  # at least one epoch done
        time.sleep(0.2)
    time.sleep(0.5)
    return proc, cmd, save_dir


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the folder is scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
