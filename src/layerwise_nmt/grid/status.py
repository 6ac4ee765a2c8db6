"""What can run and why not: tasks (data at hand, to download, or only by hand), experiments, table rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .papers import rows
from .sources import file_source, mirror_location, urls_of


@dataclass(frozen=True)
class Status:
    kind: str  # task | experiment | row
    name: str
    runnable: bool
    reason: str
    quoted: bool = False  # a row the paper quotes from other work: never run, never ours
    fetch: str = ""  # a runnable task whose data is not all at hand: "download" (automatic) or "manual"

    @property
    def state(self) -> str:
        return (self.fetch or "ok") if self.runnable else "quoted" if self.quoted else "blocked"


def task_status(config: dict, name: str) -> Status:
    task = config["tasks"][name]
    dataset = config["datasets"][task["dataset"]]
    if "pending" in dataset:
        return Status("task", name, False, f"dataset {task['dataset']}: {dataset['pending']}")
    if "user_path" in dataset and not dataset["user_path"]:
        return Status("task", name, False, f"needs licensed data the user must supply: set datasets/"
                      f"{task['dataset']}/user_path (its description in config.yaml lists the files)")
    if dataset.get("user_path"):
        root = Path(dataset["user_path"]).expanduser()
        missing = [entry.get("path", file) for file, entry in dataset.get("files", {}).items()
                   if not (root / entry.get("path", file)).is_file()]
        if missing:
            return Status("task", name, False, f"datasets/{task['dataset']}/user_path {root} lacks "
                          f"{', '.join(missing)}")
    by_hand, automatic = fetch_needs(config, task["dataset"])
    if by_hand:  # still runnable: its fetch job fails with the instructions, and a user may mirror the files
        return Status("task", name, True, "no working automatic source for " + "; ".join(
            f"{', '.join(files)} ({why}; put {'it' if len(files) == 1 else 'them'} in "
            f"{mirror_location(config, task['dataset'], '')})" for why, files in by_hand.items()), fetch="manual")
    if automatic:
        return Status("task", name, True, f"downloads {', '.join(automatic)} (not in the data mirror)",
                      fetch="download")
    return Status("task", name, True, "ready")


def fetch_needs(config: dict, dataset: str) -> tuple[dict[str, list[str]], list[str]]:
    """The downloads a dataset's files need (those not in the data mirror): ({why a person must fetch them: names},
    [names fetched automatically])."""
    spec = config["datasets"][dataset]
    by_hand, automatic = {}, []
    for name in spec.get("files", {}) if "user_path" not in spec else ():
        path = file_source(config, dataset, name).path
        if not path.startswith("results/downloads/"):
            continue
        file = path.rsplit("/", 1)[1]
        entry = spec.get("archives", {}).get(file) or spec["files"][file]
        if not urls_of(entry) or entry.get("reported_broken"):
            why = "; ".join(filter(None, [entry.get("reported_broken"), entry.get("manual")]))
            if file not in by_hand.setdefault(why, []):
                by_hand[why].append(file)
        elif file not in automatic:
            automatic.append(file)
    return by_hand, automatic


def experiment_status(config: dict, name: str) -> Status:
    """Whether an experiment can run (its model name is checked at DAG time: checks.check_model_name)."""
    experiment = config["experiments"][name]
    task = task_status(config, experiment["task"])
    if not task.runnable:
        return Status("experiment", name, False, task.reason)
    if isinstance(experiment.get("warm_start"), dict):
        path = experiment["warm_start"]["path"]
        if not Path(path).exists():
            return Status("experiment", name, False, f"warm start from {path}: no such file")
    elif experiment.get("warm_start"):
        parent = experiment_status(config, experiment["warm_start"])
        if not parent.runnable:
            return Status("experiment", name, False, f"warm start from {experiment['warm_start']}: {parent.reason}")
    return Status("experiment", name, True, "ready")


def row_statuses(config: dict) -> list[Status]:
    out = []
    for row in rows(config, ("tables",)):
        if "experiment" in row.spec:
            s = experiment_status(config, row.spec["experiment"])
            out.append(Status("row", row.label, s.runnable, s.reason))
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


def runnable_tasks(config: dict) -> list[str]:
    wanted = config.get("targets", {}).get("tasks", "all")
    names = list(config["tasks"]) if wanted == "all" else wanted
    return [t for t in names if task_status(config, t).runnable]
