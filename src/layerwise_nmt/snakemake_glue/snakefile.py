"""What workflow/rules/common.smk runs when Snakemake reads the Snakefile: the jobs' environment, the config's checks
(one line per error, named in the file that set the key), the start-of-run notes, and the grid's rule functions,
each of which stops Snakemake in one line on a config error. Plain Python over Snakemake's objects (`workflow`,
`config`, `logger`, handed in), so that it is tested without a Snakefile; snakemake itself is imported only inside
the functions that need it (the rehearsal's warm process imports every module of the package).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from collections.abc import Callable

from .. import UserError
from .. import grid
from .job_env import WORKFLOW_PID, WORKFLOW_RUN, forward_stops, job_path

# Each run's checks are remembered here (under the working directory), so that a rerun with the same config
# skips them.
CHECKED_CONFIGS = Path(".snakemake/lwnmt-checked-configs.json")
CHECKED_MODELS = Path(".snakemake/lwnmt-checked-models.json")


def stop(err) -> None:
    """A config error as the one line it is, on stderr: no WorkflowError header, traceback or Snakefile frame."""
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)


def prepare_jobs(sources: str | Path, main_process: bool, environ=os.environ) -> None:
    """The environment every job inherits. Rules call the package as `python -m layerwise_nmt`, found through
    PYTHONPATH (the checkout's src/, `sources`), so that the same command works in the project's .venv, in the
    conda envs of envs/ (job_shell_prefix) and on SLURM nodes (where Snakemake re-reads the Snakefile); a job's
    one-line error also goes to Snakemake's console (its stderr is the log; cli reads the variable); jobs run the
    Python that runs Snakemake (or their rule's conda env), whatever `python` is first on PATH. In the main
    process, a training stopped by Ctrl-C stops the workflow through WORKFLOW_PID (job_env.py), and a stop sent to
    this process alone stops the running jobs, as a terminal's Ctrl-C does."""
    environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(sources), environ.get("PYTHONPATH")])))
    environ.update(LWNMT_ERRORS_ON_STDOUT="1")
    environ.update(PATH=job_path(environ.get("PATH")))
    if main_process:
        environ.update({WORKFLOW_PID: str(os.getpid())})
        environ.update({WORKFLOW_RUN: f"{os.getpid()}-{time.time_ns()}"})
        forward_stops()


def job_shell_prefix(sources: str | Path, executable: str | None) -> str:
    """What every job's shell command begins with (Snakemake's `shell.prefix`, written for its formatting): the
    checkout's src/ put back on PYTHONPATH where it is missing, because `--use-conda` deletes PYTHONPATH from a
    conda job's environment (conda's search paths must not mix), and no env of envs/ installs the package; left
    as it is where prepare_jobs' is there, so that an unchanged environment stays the fork server's. Bash keeps
    the `set -euo pipefail` Snakemake gives it by default."""
    import shlex

    strict = "set -euo pipefail; " if Path(executable or "").name == "bash" else ""
    command = 'case ":${PYTHONPATH:-}:" in *:SRC:*) ;; *) export PYTHONPATH=SRC${PYTHONPATH:+:$PYTHONPATH} ;; esac; '

    def braced(text: str) -> str:  # Snakemake formats the prefix: its braces, and the path's, are doubled
        return text.replace("{", "{{").replace("}", "}}")

    return braced(strict + command).replace("SRC", braced(shlex.quote(str(sources))))


def config_files(workflow) -> list[str]:
    """The config files in the order Snakemake layers them: the Snakefile's config.yaml, then each --configfile."""
    overlays = [str(f) for f in workflow.overwrite_configfiles]
    return [str(f) for f in workflow.configfiles if str(f) not in overlays] + overlays


def check_config(config: dict, workflow, logger, rehearse: Callable[[dict, str], None]) -> list[str]:
    """The config checked (or Snakemake stopped in one line) and, with `--config rehearsal=<stand-ins>`, turned into
    the rehearsal's by `rehearse` (rehearsal.apply: the rehearsal is above this folder); the tasks the run targets.
    Snakemake's own schema pass then fills in the schema's defaults."""
    from snakemake.utils import validate

    files = config_files(workflow)
    try:
        # each file on its own first: an overlay's misspelt experiment, table or figure named with the closest ones
        from ..grid.config_files import check_files, check_targets
        from ..grid.status import check_own_corpora

        check_files(files, grid.read)
        if config.get("rehearsal") and not isinstance(config["rehearsal"], dict):
            rehearse(config, config["rehearsal"])
        # one-line errors naming the key, plus the cross-references a schema cannot check (task → dataset, ...)
        grid.validate(config)
        check_targets(config)
        if workflow.is_main_process:  # every stage's settings through the classes that will read them (a typo
            from ..grid.stage_checks import check_experiments  # here would otherwise fail a job hours in)

            check_experiments(config, cache=CHECKED_CONFIGS)
        check_own_corpora(config)
        target_tasks = grid.runnable_tasks(config)
    except UserError as err:  # named in the file that set the key: config.yaml, or an overlay (--configfile)
        stop(grid.located(err, files))
    if workflow.is_main_process:  # own models imported and built in a child process, so that a broken plugin
        from ..grid.stage_checks import check_own_models  # stops the dry run, not a job 8 s in

        try:
            skipped = check_own_models(config, cache=CHECKED_MODELS)
        except UserError as err:  # the very line `lwnmt params` prints
            stop(err)
        if skipped:
            logger.info(f"own models: {skipped}")
    validate(config, grid.SCHEMA)
    return target_tasks


def announce(config: dict, logger) -> None:
    """What the main process says before anything runs: the SLURM plugin patched (a plain `scancel` must fail the
    job, not hang the workflow: slurm.py), a comparison the targets leave out, the budgets that cannot work as
    configured (fix these before spending GPU-days), and what this run's targets need that cannot run yet."""
    from ..grid.budget_checks import budget_warnings
    from ..grid.compare import untargeted_comparisons
    from ..grid.status import targeted_statuses
    from .slurm import patch_status_query

    if patch_status_query() is False:
        logger.warning(
            "snakemake-executor-plugin-slurm: no query_job_status to patch in this version (constraints.txt pins the "
            "one tested); a SLURM job cancelled by a plain scancel may leave the workflow waiting for it"
        )
    for line in untargeted_comparisons(config):  # an overlay's comparison that an earlier file's targets leave out
        logger.warning(f"targets: {line}")
    flagged = budget_warnings(config)
    for line in flagged:
        logger.warning(f"budget: {line}")
    logger.info(
        f"budget check: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart "
        f"cannot work as configured (`lwnmt plan` lists every budget)"
    )
    statuses = targeted_statuses(config)  # what this run's targets need, not the full grid's every row
    blocked = [s for s in statuses if not s.runnable and s.state == "blocked"]
    if blocked:
        logger.info(
            f"{len(blocked)} tasks/experiments/table rows cannot run yet (e.g. {blocked[0].name}: "
            f"{blocked[0].reason}); `lwnmt status` lists them all."
        )
    manual = [s for s in statuses if s.state == "manual"]  # in the DAG: their extract jobs fail saying what to do
    if manual:
        logger.info(
            f"{len(manual)} tasks/experiments/table rows need a manual download first (e.g. {manual[0].name}: "
            f"{manual[0].reason}); `lwnmt status` lists them all."
        )


def stopping_on_config_errors(method: Callable) -> Callable:
    """A grid question as a rule's input or params function: a config error (a target naming an experiment the
    config does not have, ...) stops Snakemake in one line, not an InputFunctionException and its traceback."""

    @functools.wraps(method)  # Snakemake reads the signature to pass only what the function takes
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except UserError as err:
            stop(err)

    return call


class BoundRuleInputs:
    """grid.RuleInputs bound to one config, as the rules reach it (`R = snakefile.rule_inputs(config)`, then
    `input: R.train_inputs`): each public method, stopping Snakemake in one line on a config error."""

    def __init__(self, inputs: grid.RuleInputs):
        self._inputs = inputs

    def __getattr__(self, name: str) -> Callable:
        method = getattr(self._inputs, name) if not name.startswith("_") else None
        if not callable(method):
            raise AttributeError(f"grid.RuleInputs has no rule function {name!r}")
        return stopping_on_config_errors(method)


def rule_inputs(config: dict) -> BoundRuleInputs:
    """The rules' input and params functions, bound to `config` (its experiments priced for the jobs' resources)."""
    from ..grid.pricing import experiment_cost

    return BoundRuleInputs(grid.RuleInputs(config, cost=experiment_cost))
