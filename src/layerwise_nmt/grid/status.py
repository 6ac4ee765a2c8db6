"""What can run and why not: tasks (data at hand, to download, or only by hand), experiments, table rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from .layout import is_download
from .papers import rows, targeted_names
from .sources import file_source, urls_of
from .tasks import raw_files


@dataclass(frozen=True)
class Status:
    kind: str  # task | experiment | row
    name: str
    runnable: bool
    reason: str
    quoted: bool = False  # a row the paper quotes from other work: never run, never ours
    # data not all at hand: "download" (a task's fetch job gets it) or "manual" (a person must fetch a file first;
    # a task, and every experiment and row on it, stays in the workflow, whose fetch job says what to do)
    fetch: str = ""
    waits_for: str = ""  # an experiment's or row's "manual": the task whose files a person must fetch

    @property
    def state(self) -> str:
        if self.runnable:
            return self.fetch or "ok"
        return "quoted" if self.quoted else "blocked"

    @property
    def can_run(self) -> bool:
        """Runs as the config stands: nothing a person must fetch first."""
        return self.runnable and self.fetch != "manual"


def task_status(config: dict, name: str) -> Status:
    task = config["tasks"][name]
    dataset = config["datasets"][task["dataset"]]
    if "pending" in dataset:
        return Status("task", name, False, f"dataset {task['dataset']}: {dataset['pending']}")
    if "user_path" in dataset and not dataset["user_path"]:
        return Status(
            "task",
            name,
            False,
            f"needs licensed data the user must supply: set datasets/"
            f"{task['dataset']}/user_path (its description in config.yaml lists the files)",
        )
    if dataset.get("user_path"):
        root = Path(dataset["user_path"]).expanduser()
        missing = [
            entry.get("path", file)
            for file, entry in dataset.get("files", {}).items()
            if not (root / entry.get("path", file)).is_file()
        ]
        key = f"datasets/{task['dataset']}/{'local/dir' if isinstance(dataset.get('local'), dict) else 'user_path'}"
        if not root.is_dir():
            return Status(
                "task", name, False, f"{key} {root}: no such directory; expected one holding {', '.join(missing)}"
            )
        if missing:
            return Status("task", name, False, f"{key} {root} lacks {', '.join(missing)}")
    by_hand, automatic = fetch_needs(config, name)
    if by_hand:  # still runnable: its extract job fails with the instructions
        # where the user puts the file: in the download cache of their own results/, never the data mirror (a
        # shared, read-only copy for many users, which is not theirs to write into)
        return Status(
            "task",
            name,
            True,
            "no working automatic source for "
            + "; ".join(
                f"{', '.join(Path(p).name for p in paths)} ({why}; put {'it' if len(paths) == 1 else 'them'} at "
                f"{', '.join(paths)})"
                for why, paths in by_hand.items()
            ),
            fetch="manual",
        )
    if automatic:
        return Status(
            "task", name, True, f"downloads {', '.join(automatic)} (not in the data mirror)", fetch="download"
        )
    return Status("task", name, True, "ready")


def fetch_needs(config: dict, task: str) -> tuple[dict[str, list[str]], list[str]]:
    """The downloads a task's files need (those not in the data mirror): ({why a person must fetch them: their
    places in the download cache}, [names fetched automatically]). Only the files its splits read: a task on a
    dataset's dev and test sets fetches neither its training archives nor their instructions."""
    dataset = config["tasks"][task]["dataset"]
    spec = config["datasets"][dataset]
    by_hand: dict[str, list[str]] = {}
    automatic: list[str] = []
    declared = spec.get("files", {}) if "user_path" not in spec else {}
    for name in with_archives(declared, [f for f in raw_files(config["tasks"][task]) if f in declared]):
        path = file_source(config, dataset, name).path
        if not is_download(path):
            continue
        file = path.rsplit("/", 1)[1]
        entry = spec.get("archives", {}).get(file) or spec["files"][file]
        if not urls_of(entry) or (entry.get("reported_broken") and not entry.get("mirrors")):  # a mirror is tried
            if Path(path).is_file():  # fetched by hand into its download folder: at hand
                continue
            why = "; ".join(filter(None, [entry.get("reported_broken"), entry.get("manual")]))
            if path not in by_hand.setdefault(why, []):
                by_hand[why].append(path)
        elif file not in automatic:
            automatic.append(file)
    return by_hand, automatic


def with_archives(files: dict, names: list[str]) -> list[str]:
    """`names` and every file of the dataset that holds one of them, up the chain (IWSLT's per-pair .tgz inside
    the campaign's): the files a download may be needed for."""
    out: list[str] = []
    for name in names:
        while name in files and name not in out:
            out.append(name)
            name = files[name].get("archive")
    return out


def experiment_status(config: dict, name: str) -> Status:
    """Whether an experiment can run (its model name is checked at DAG time: checks.check_model_name)."""
    experiment = config["experiments"][name]
    task = task_status(config, experiment["task"])
    if not task.runnable:
        return Status("experiment", name, False, task.reason)
    manual = {"fetch": "manual", "waits_for": experiment["task"]} if task.fetch == "manual" else {}
    if isinstance(experiment.get("warm_start"), dict):
        path = experiment["warm_start"]["path"]
        if not Path(path).exists():
            return Status("experiment", name, False, f"warm start from {path}: no such file")
    elif experiment.get("warm_start"):
        parent = experiment_status(config, experiment["warm_start"])
        if not parent.runnable:
            return Status("experiment", name, False, f"warm start from {experiment['warm_start']}: {parent.reason}")
        if parent.fetch == "manual" and not manual:
            return Status(
                "experiment",
                name,
                True,
                f"warm start from {experiment['warm_start']}: {parent.reason}",
                fetch="manual",
                waits_for=parent.waits_for,
            )
    if manual:
        return Status("experiment", name, True, f"task {experiment['task']}: {task.reason}", **manual)
    return Status("experiment", name, True, "ready")


def row_statuses(config: dict, targeted: bool = False) -> list[Status]:
    out = []
    for row in rows(config, ("tables",), targeted=targeted):
        if "experiment" in row.spec:
            s = experiment_status(config, row.spec["experiment"])
            out.append(Status("row", row.label, s.runnable, s.reason, fetch=s.fetch, waits_for=s.waits_for))
        else:
            quoted = "quoted_from" in row.spec
            reason = f"quoted from {row.spec['quoted_from']}" if quoted else row.spec.get("not_run", "no experiment")
            out.append(Status("row", row.label, False, reason, quoted=quoted))
    return out


def rows_by_experiment(config: dict) -> dict[str, list[str]]:
    """Experiment → the targeted table and figure rows that run it ("<paper> <table> · <label>")."""
    out: dict[str, list[str]] = {}
    for row in rows(config, targeted=True):
        if "experiment" in row.spec:
            out.setdefault(row.spec["experiment"], []).append(row.label)
    return out


def all_statuses(config: dict) -> list[Status]:
    return (
        [task_status(config, t) for t in config["tasks"]]
        + [experiment_status(config, e) for e in config.get("experiments", {})]
        + row_statuses(config)
    )


def targeted(config: dict) -> tuple[list[str], list[str]]:
    """(tasks, experiments) a run of the config's `targets:` needs: the targeted tasks, the experiments of the
    targeted tables' and figures' rows with the runs they warm-start from, and those experiments' tasks."""
    experiments = config.get("experiments", {})
    needed, todo = set(), list(rows_by_experiment(config))
    while todo:
        name = todo.pop()
        if name in experiments and name not in needed:
            needed.add(name)
            if isinstance(experiments[name].get("warm_start"), str):
                todo.append(experiments[name]["warm_start"])
    listed = targeted_names(config, "tasks")
    tasks = set(config["tasks"] if listed is None else listed)
    tasks |= {experiments[name]["task"] for name in needed}
    return [t for t in config["tasks"] if t in tasks], [e for e in experiments if e in needed]


def targeted_statuses(config: dict) -> list[Status]:
    """all_statuses for what the config's `targets:` need (an overlay's own tables, not the full grid's)."""
    tasks, experiments = targeted(config)
    return (
        [task_status(config, t) for t in tasks]
        + [experiment_status(config, e) for e in experiments]
        + row_statuses(config, targeted=True)
    )


def check_own_corpora(config: dict) -> None:
    """A corpus of the user's own files (`local:`) that the targets need and that is not there stops the dry run in
    one line: the rows it feeds would otherwise drop out of the DAG with only a warning among several."""
    tasks, _ = targeted(config)
    for name in tasks:
        dataset = config["datasets"][config["tasks"][name]["dataset"]]
        if isinstance(dataset.get("local"), dict) and not (status := task_status(config, name)).runnable:
            raise UserError(f"task {name}: {status.reason}")


def summary(statuses: list[Status]) -> str:
    """ "7 of 11 can run; 3 need a manual download first; 1 blocked" for statuses of one kind: what waits for a
    person is counted apart from what runs as the config stands."""
    manual = sum(s.state == "manual" for s in statuses)
    blocked = sum(s.state == "blocked" for s in statuses)
    quoted = sum(s.state == "quoted" for s in statuses)
    parts = [f"{sum(s.can_run for s in statuses)} of {len(statuses)} can run"]
    if manual:
        parts.append(f"{manual} need{'s' if manual == 1 else ''} a manual download first")
    if blocked:
        parts.append(f"{blocked} blocked")
    if quoted:
        parts.append(f"{quoted} quoted from other work")
    return "; ".join(parts)


def runnable_tasks(config: dict) -> list[str]:
    names = targeted_names(config, "tasks")
    names = list(config["tasks"]) if names is None else names
    return [t for t in names if task_status(config, t).runnable]
