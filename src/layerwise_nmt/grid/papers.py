"""Papers → tables (and figures) → rows: the walk every report and status follows, and the metrics a table reads."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterator

from .. import UserError


def metrics_of(table: dict) -> list[str]:
    """A table's score columns: "bleu" or "chrf" (= test), or "<split>_bleu" / "<split>_chrf" read from that split's
    `<split>.score.json` (valid_bleu, test_chrf; NIST's mt04_bleu etc. once its test sets are splits)."""
    metric = table.get("metric", "bleu")
    return [metric] if isinstance(metric, str) else list(metric)


def measure_of(metric: str) -> str:
    """The score.json key a metric column reads: bleu or chrf."""
    return "chrf" if metric.endswith("chrf") else "bleu"


def split_of(metric: str) -> str:
    measure = measure_of(metric)
    return "test" if metric == measure else metric.removesuffix(f"_{measure}")


EVERY = "all"  # `targets:` value of a kind (tasks, tables, figures) that stands for every one the config declares


def targeted_names(config: dict, kind: str) -> list[str] | None:
    """The names `targets: <kind>` lists; None where it says "all" or is left out (every declared one)."""
    wanted = (config.get("targets") or {}).get(kind, EVERY)
    return None if wanted == EVERY else list(wanted)


def tables(config: dict, kind: str = "tables", targeted: bool = True) -> list[tuple[str, str]]:
    """The targeted (paper, table) pairs (targeted=False: all declared); kind="figures" for (paper, figure) pairs."""
    wanted = targeted_names(config, kind) if targeted else None
    declared = [(p, t) for p, spec in config.get("papers", {}).items() for t in spec.get(kind, {})]
    if wanted is None:
        return declared
    missing = [w for w in wanted if tuple(w.split("/", 1)) not in declared]
    if missing:
        from .names import did_you_mean

        raise UserError(
            f"config key targets/{kind}: unknown {kind[:-1]} {missing[0]!r}"
            f"{did_you_mean(missing[0], ['/'.join(d) for d in declared], kind)} (<paper>/<{kind[:-1]}>)"
        )
    return [(paper, name) for paper, name in (w.split("/", 1) for w in wanted)]


APPENDED_AS = "appended_as"  # a row added by `append_rows`: its name there


def append_rows(config: dict) -> None:
    """Each table's and figure's `append_rows` (rows an overlay adds, by names of its own) placed after its `rows`;
    in place, and the same however often it runs."""
    for paper in (config.get("papers") or {}).values():
        for kind in ("tables", "figures"):
            for spec in (paper.get(kind) or {}).values():
                added = spec.pop("append_rows", None) or {}
                # each added row keeps the name the overlay gave it: an error about it names that key
                spec["rows"] = list(spec.get("rows", [])) + [{**row, APPENDED_AS: key} for key, row in added.items()]


@dataclass(frozen=True)
class Row:
    """One row of a paper's table or figure, where the config declares it."""

    paper: str
    kind: str  # tables | figures
    name: str  # the table or figure
    index: int
    spec: dict

    @property
    def key(self) -> str:
        if APPENDED_AS in self.spec:
            return f"papers/{self.paper}/{self.kind}/{self.name}/append_rows/{self.spec[APPENDED_AS]}"
        return f"papers/{self.paper}/{self.kind}/{self.name}/rows/{self.index}"

    @property
    def label(self) -> str:
        return f"{self.paper} {self.name} · {self.spec['label']}"


def rows(config: dict, kinds: tuple[str, ...] = ("tables", "figures"), targeted: bool = False) -> Iterator[Row]:
    """The papers → tables (figures) → rows walk, in config order; targeted=True: the targeted tables' only."""
    for kind in kinds:
        for paper, name in tables(config, kind, targeted):
            for index, row in enumerate(config["papers"][paper][kind][name]["rows"]):
                yield Row(paper, kind, name, index, row)
