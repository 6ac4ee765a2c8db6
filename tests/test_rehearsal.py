"""The rehearsal and the static budget check: a row whose policy cannot work is named before anything runs, and
the rehearsal keeps every row's structure (its DAG has the full config's row jobs) while shrinking sizes."""

import gzip
import hashlib
import io
import math
import subprocess
import sys
import tarfile
import zipfile

import pytest
import yaml

from conftest import ROOT
from layerwise_nmt import UserError, grid
from layerwise_nmt.grid.budget_checks import budget, budget_warnings
from layerwise_nmt.rehearsal import apply
from layerwise_nmt.rehearsal.overlay import shrink, squeeze
from layerwise_nmt.rehearsal.run import ROW_RULES, SNAKEMAKE, dry_run, owner, parse_log
from layerwise_nmt.rehearsal.standins import Manifest, build

pytestmark = pytest.mark.system  # the rehearsal's pieces through Snakemake

ENFR_ROW = "gca T2 · En-Fr Transformer (re-implementation)"


def enfr_mistake(path):
    """The full config with GCA En-Fr as it was: 30K updates of one GPU batch, averaged by epoch."""
    overlay = path / "mistake.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "experiments": {
                    "gca.enfr.transformer": {
                        "train": {"update_freq": 1, "max_update": 30000, "save_interval_updates": 0},
                        "average": {"num": 10, "by": "epoch"},
                    }
                }
            }
        )
    )
    return overlay


def test_static_check_names_the_row_that_cannot_average(tmp_path):
    assert budget_warnings(grid.load(ROOT / "config.yaml")) == []  # the real grid: every policy can work
    config = grid.load(ROOT / "config.yaml", enfr_mistake(tmp_path))
    b = budget(config, "gca.enfr.transformer")
    assert b.epochs == pytest.approx(30000 * 3584 / (36_000_000 * 32)) and b.ends_mid_epoch
    [warning] = [w for w in budget_warnings(config) if w.startswith("gca.enfr.transformer ")]
    assert ENFR_ROW in warning and "no epoch checkpoint" in warning
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "status",
            "--config",
            str(ROOT / "config.yaml"),
            "--config",
            str(enfr_mistake(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "flagged gca.enfr.transformer" in out and ENFR_ROW in out
    dry = subprocess.run(
        SNAKEMAKE
        + [
            "-d",
            str(tmp_path),
            "-n",
            "--cores",
            "1",
            "--configfile",
            str(ROOT / "config.yaml"),
            str(enfr_mistake(tmp_path)),
        ],
        capture_output=True,
        text=True,
    )
    assert "budget: gca.enfr.transformer" in dry.stdout + dry.stderr  # at `snakemake -n` time too


@pytest.mark.parametrize(
    "change, phrase",
    [
        ({"train": {"patience": 200}}, "early stopping cannot act"),
        ({"train": {"warmup_updates": 500000}}, "the lr never peaks"),
        ({"average": {"num": 80, "by": "epoch"}}, "average of 80 epoch checkpoints"),
        ({"average": {"num": 10, "by": "update"}}, "no update checkpoint is saved"),
        ({"train": {"max_epoch": 12, "warmup_updates": 10000}}, "starts at update ~"),
        (
            {
                "train": {
                    "max_epoch": 0,
                    "max_update": 12000,
                    "save_interval_updates": 1000,
                    "keep_interval_updates": 10,
                },
                "average": {"num": 10, "by": "update"},
            },
            "the average of the last 10 update checkpoints starts at update ~3,000, inside the 4,000-update warm-up",
        ),
    ],
)
def test_static_check_flags_each_policy(tmp_path, change, phrase):
    overlay = tmp_path / "change.yaml"
    overlay.write_text(yaml.safe_dump({"experiments": {"gca.deen.transformer": change}}))
    warnings = budget_warnings(grid.load(ROOT / "config.yaml", overlay))
    assert any(w.startswith("gca.deen.transformer ") and phrase in w for w in warnings), warnings


def test_squeeze_keeps_every_relation_that_decides_a_policy(tmp_path):
    """For every experiment: the rehearsal ends mid-epoch iff the real run does, before its first epoch iff the
    real run does, and has a policy problem iff the real run has one (with the En-Fr mistakes planted: DynamicConv
    as it was too, its last 10 of 12 epochs averaged from inside its warm-up)."""
    assert all(squeeze(a) <= squeeze(b) for a, b in zip(range(0, 200), range(1, 201), strict=True))
    dynamic_conv = tmp_path / "dynamic_conv.yaml"
    dynamic_conv.write_text(
        yaml.safe_dump({"experiments": {"gca.enfr.dynamic_conv": {"average": {"num": 10, "by": "epoch"}}}})
    )
    config = grid.load(ROOT / "config.yaml", enfr_mistake(tmp_path), dynamic_conv)
    rehearsal = shrink(config, Manifest())
    for name in config["experiments"]:
        real, small = budget(config, name), budget(rehearsal, name)
        if real.epochs is None:
            continue
        assert small.ends_mid_epoch == real.ends_mid_epoch, name
        assert (math.floor(real.epochs) == 0) == (math.floor(small.epochs) == 0), name
        assert bool(small.problems) == bool(real.problems), (name, real.problems, small.problems)
        assert small.updates < 200, name  # and it is small
        e = grid.experiment(rehearsal, name)
        assert e["arch"]["d_model"] == 16 and e["seeds"] == grid.experiment(config, name)["seeds"]
        assert e["train"].get("update_freq", 1) == grid.experiment(config, name)["train"].get("update_freq", 1)
    assert "no epoch checkpoint" in budget(rehearsal, "gca.enfr.transformer").problems[0]
    for cfg in (config, rehearsal):
        assert "inside the" in budget(cfg, "gca.enfr.dynamic_conv.cross_view").problems[0]


@pytest.fixture(scope="module")
def standins(tmp_path_factory, mirror):
    out = tmp_path_factory.mktemp("rehearsal") / "standins"
    return out, build(grid.load(ROOT / "config.yaml"), mirror, out)


def test_standins_have_the_releases_formats_and_packaging(standins):
    out, manifest = standins
    root = out / "mirror"
    assert "NOT the real corpora" in (out / "STANDINS.md").read_text()
    with tarfile.open(root / "iwslt14-ro-en/2014-01.tgz") as outer:  # IWSLT: a pair's .tgz inside the campaign's
        inner = tarfile.open(fileobj=io.BytesIO(outer.extractfile("2014-01/texts/ro/en/ro-en.tgz").read()))
        tags = inner.extractfile("ro-en/train.tags.ro-en.ro").read().decode()
    assert "<talkid>1</talkid>" in tags and "<url>" in tags and "<title>" in tags and "<description>" in tags
    with tarfile.open(root / "wmt14-en-fr/training-giga-fren.tar") as tar:  # a .gz inside a .tar
        assert gzip.decompress(tar.extractfile("giga-fren.release2.fixed.fr.gz").read()).decode().count("\n") > 10
    with zipfile.ZipFile(root / "wmt17-zh-en/casia2015.zip") as zf:  # the release's real names, not the wildcard
        assert sorted(zf.namelist()) == ["casia2015/casia2015_ch.txt", "casia2015/casia2015_en.txt"]
        assert "。" in zf.read("casia2015/casia2015_ch.txt").decode()
    with zipfile.ZipFile(root / "wmt17-zh-en/datum2017.zip") as zf:  # several files per side, one unended
        books = sorted(n for n in zf.namelist() if n.endswith("_cn.txt"))
        assert len(books) == 20 and not zf.read(books[-1]).endswith(b"\n")
    with tarfile.open(root / "wmt17-zh-en/dev.tgz") as tar:  # .sgm where the release has .sgm; other members too
        assert '<seg id="1">' in tar.extractfile("dev/newsdev2017-zhen-src.zh.sgm").read().decode()
        assert "dev/newsdev2017-enzh-src.en.sgm" in tar.getnames()
    with tarfile.open(root / "wmt14-en-fr/test-full.tgz") as tar:  # WMT SGML
        assert '<seg id="1">' in tar.extractfile("test-full/newstest2014-fren-ref.fr.sgm").read().decode()
    assert (out / "user/nist-zh-en/mt04/ref.sgm").read_text().count("<DOC") == 4  # 4 references
    real = root / "wmt14-en-de/test-full/newstest2014-deen-src.en.sgm"
    assert real.is_symlink()  # the mirror's own files are used as they are, checksums and all
    archive = root / "wmt14-en-de/training-parallel-europarl-v7.tgz"
    digest = manifest.digests[("wmt14-en-de", "training-parallel-europarl-v7.tgz")]["sha256"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == digest
    config = grid.load(ROOT / "config.yaml")
    apply(config, out)
    grid.validate(config)
    assert config["datasets"]["wmt14-en-de"]["archives"]["training-parallel-europarl-v7.tgz"]["sha256"] == digest
    assert config["datasets"]["wmt14-en-fr"]["archives"]["training-parallel-europarl-v7.tgz"]["sha256"] != digest
    assert all(grid.task_status(config, t).runnable for t in config["tasks"])


def test_rehearsal_dag_has_every_row_job_of_the_full_config(standins, tmp_path, mirror):
    out, manifest = standins
    env = {"PATH": f"{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin", "LWNMT_DATA_MIRROR": str(mirror)}
    supplied = tmp_path / "nist.yaml"
    supplied.write_text(yaml.safe_dump({"datasets": {k: {"user_path": v} for k, v in manifest.user_paths.items()}}))
    full = dry_run(tmp_path / "full", "--configfile", str(ROOT / "config.yaml"), str(supplied), env=env)
    planned = dry_run(tmp_path / "rehearsal", "--config", f"rehearsal={out}", env=env)
    assert full["train"] > 150 and full["figure"] == 7 and full["inspect"] == 2 + 3  # Dou F5: two models; LWC F2-4
    for rule in ROW_RULES:
        assert planned[rule] == full[rule], rule
    assert planned["fetch"] == 0  # everything from the stand-in mirror


def test_summary_parses_failures_with_their_rows():
    log = """Finished jobid: 3 (Rule: train)
Finished jobid: 4 (Rule: train)
Error in rule average:
    jobid: 9
    output: results/wmt14_enfr/gca.enfr.transformer/seed1/averaged.pt
    log: results/wmt14_enfr/gca.enfr.transformer/seed1/average.log (check log file(s) for error details)
Error in rule average:
    jobid: 9
    output: results/wmt14_enfr/gca.enfr.transformer/seed1/averaged.pt
    log: results/wmt14_enfr/gca.enfr.transformer/seed1/average.log (check log file(s) for error details)
"""
    finished, failures = parse_log(log)
    assert finished["train"] == 2
    assert failures == [
        {
            "rule": "average",
            "output": "results/wmt14_enfr/gca.enfr.transformer/seed1/averaged.pt",
            "log": "results/wmt14_enfr/gca.enfr.transformer/seed1/average.log",
            "attempts": 2,
        }
    ]
    name, rows = owner(failures[0]["output"], grid.load(ROOT / "config.yaml"))
    assert name == "gca.enfr.transformer" and ENFR_ROW in rows


def test_the_run_coalesces_snakemakes_reevaluation_timers():
    """However many passes ask for one, at most one re-evaluation is pending; each request is still followed by
    one within its delay, and no timer keeps the process alive."""
    import threading

    from snakemake.scheduling.job_scheduler import JobScheduler

    from layerwise_nmt.rehearsal.scheduler import coalesce_reevaluations

    original = JobScheduler._schedule_reevalutation
    try:
        assert coalesce_reevaluations()

        class Scheduler:
            _open_jobs = threading.Semaphore(0)
            _schedule_reevalutation = JobScheduler._schedule_reevalutation

        scheduler = Scheduler()
        for _ in range(50):
            scheduler._schedule_reevalutation(0.2)
        assert all(t.daemon for t in threading.enumerate() if isinstance(t, threading.Timer))
        assert scheduler._open_jobs.acquire(timeout=5)
        assert not scheduler._open_jobs.acquire(timeout=0.4)  # one pass, not fifty
        scheduler._schedule_reevalutation(0.05)
        assert scheduler._open_jobs.acquire(timeout=5)
    finally:
        JobScheduler._schedule_reevalutation = original


@pytest.mark.parametrize(
    "train, phrase",
    [
        (
            {"max_update": 100},
            "total_num_update 1,000 > max_update 100: polynomial_decay's lr never decays (set "
            "total_num_update: 100 with max_update)",
        ),
        (
            {"max_update": 700},
            "total_num_update 1,000 > max_update 700: polynomial_decay's lr ends at 46% of its peak "
            "(set total_num_update: 700 with max_update)",
        ),
        (
            {"max_update": 2000},
            "total_num_update 1,000 < max_update 2,000: polynomial_decay's lr stays at its "
            "end_learning_rate 0 for the last 1,000 updates (set total_num_update: 2000 with max_update)",
        ),
    ],
)
def test_a_shortened_or_longer_run_names_its_decay_horizon(tmp_path, train, phrase):
    """fairseq's polynomial_decay takes its horizon from total_num_update alone, never from max_update (both
    explicit): an experiment that changes max_update over the demo's preset (1,000 and 1,000) keeps the old
    horizon, so the budget check names the two keys where they disagree."""

    def warnings(train: dict) -> list[str]:
        overlay = tmp_path / "short.yaml"
        overlay.write_text(
            yaml.safe_dump(
                {
                    "experiments": {"demo.short": {"extends": "demo.transformer", "train": train}},
                    "papers": {
                        "demo": {
                            "tables": {"T1": {"append_rows": {"short": {"label": "short", "experiment": "demo.short"}}}}
                        }
                    },
                }
            )
        )
        config = grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", overlay)
        return [w for w in budget_warnings(config) if w.startswith("demo.short ")]

    [warning] = warnings(train)
    assert phrase in warning, warning
    assert not [w for w in warnings({**train, "total_num_update": train["max_update"]}) if "total_num_update" in w]


def test_a_mirror_without_the_standins_text_is_refused_in_one_line(tmp_path):
    """A user's first `make rehearse` without the six text files: one line naming them, before anything is built."""
    mirror = tmp_path / "mirror"
    (mirror / "multi30k").mkdir(parents=True)
    for lang in ("de", "en"):
        with gzip.open(mirror / f"multi30k/train.{lang}.gz", "wt") as f:
            f.write("ein satz\n" if lang == "de" else "a sentence\n")
    with pytest.raises(UserError) as error:
        build(grid.load(ROOT / "config.yaml"), mirror, tmp_path / "out")
    message = str(error.value)
    assert "\n" not in message and "multi30k" not in message.split(";")[0]
    assert "wmt16-en-ro/newsdev2016-enro.ro" in message and "wmt14-en-de/newstest2013.de.gz" in message
    assert not (tmp_path / "out").exists()
