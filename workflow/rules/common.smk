# Adapters between Snakemake and the grid (layerwise_nmt.grid): the config is read, checked and asked through the
# package, so that what the rules need is tested without Snakemake; here only what needs Snakemake's objects.

import functools
import json
import os
import sys
import time
from pathlib import Path

# Rules call the package as `python -m layerwise_nmt`, found through PYTHONPATH, so the same command works in the
# project's .venv, in the conda envs of envs/ and on SLURM nodes (where Snakemake re-reads this file).
SOURCES = Path(workflow.current_basedir).parents[1] / "src"  # the checkout's src/, however Snakemake was started
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(SOURCES), os.environ.get("PYTHONPATH")])))
# A job's one-line error also goes to Snakemake's console (its stderr is the log); only jobs get this (cli)
os.environ.update(LWNMT_ERRORS_ON_STDOUT="1")
sys.path.insert(0, str(SOURCES))
from layerwise_nmt.workflow.job_env import WORKFLOW_PID, WORKFLOW_RUN, forward_stops, job_path

# Jobs run the Python that runs Snakemake (or their rule's conda env), whatever `python` is first on PATH
os.environ.update(PATH=job_path(os.environ.get("PATH")))
if workflow.is_main_process:  # a training stopped by Ctrl-C stops the workflow through it (workflow/job_env.py)
    os.environ.update({WORKFLOW_PID: str(os.getpid())})
    os.environ.update({WORKFLOW_RUN: f"{os.getpid()}-{time.time_ns()}"})
    forward_stops()  # and a stop sent to this process alone stops the running jobs, as a terminal's Ctrl-C does
GPUS_PER_JOB = config.get("gpus_per_job", 1)  # per training job; 0 = CPU

from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.grid.budget_checks import budget_warnings
from layerwise_nmt.grid.pricing import experiment_cost
from layerwise_nmt.grid.rules import LENPEN_TUNING_SPLIT

from snakemake.utils import validate


def stop(err):
    """A config error as the one line it is, on stderr: no WorkflowError header, traceback or Snakefile frame."""
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)


OVERLAYS = [str(f) for f in workflow.overwrite_configfiles]  # --configfile, after the Snakefile's config.yaml
CONFIG_FILES = [str(f) for f in workflow.configfiles if str(f) not in OVERLAYS] + OVERLAYS
try:
    # each file on its own first: an overlay's misspelt experiment, table or figure named with the closest ones
    from layerwise_nmt.grid.config_files import check_files, check_targets

    check_files(CONFIG_FILES, grid.read)
    if config.get("rehearsal") and not isinstance(config["rehearsal"], dict):  # `--config rehearsal=<stand-ins>`
        from layerwise_nmt import rehearsal

        rehearsal.apply(config, config["rehearsal"])
    # One-line errors naming the key, plus the cross-references a schema cannot check (task → dataset, ...).
    grid.validate(config)
    check_targets(config)
    if workflow.is_main_process:  # every stage's settings through the classes that will read them (a typo here
        from layerwise_nmt.grid.stage_checks import check_experiments  # would otherwise fail a job hours in)

        check_experiments(config, cache=Path(".snakemake/lwnmt-checked-configs.json"))
    TARGET_TASKS = grid.runnable_tasks(config)
except UserError as err:  # named in the file that set the key: config.yaml, or an overlay (--configfile)
    stop(grid.located(err, CONFIG_FILES))
if workflow.is_main_process:  # own models imported and built in a child process, so that a broken plugin stops
    from layerwise_nmt.grid.stage_checks import check_own_models  # the dry run, not a job 8 s in

    try:
        skipped = check_own_models(config, cache=Path(".snakemake/lwnmt-checked-models.json"))
    except UserError as err:  # the very line `lwnmt params` prints
        stop(err)
    if skipped:
        logger.info(f"own models: {skipped}")
validate(config, grid.SCHEMA)  # Snakemake's own pass fills in the schema defaults

if workflow.is_main_process:
    from layerwise_nmt.workflow.slurm import patch_status_query

    patch_status_query()  # a plain `scancel` must fail the job, not hang the workflow (see layerwise_nmt/workflow/slurm.py)

    from layerwise_nmt.grid.compare import untargeted_comparisons

    for line in untargeted_comparisons(config):  # an overlay's comparison that an earlier file's targets leave out
        logger.warning(f"targets: {line}")

    flagged = budget_warnings(config)  # estimated before anything runs: fix these before spending GPU-days
    for line in flagged:
        logger.warning(f"budget: {line}")
    logger.info(
        f"budget check: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart "
        f"cannot work as configured (`lwnmt plan` lists every budget)"
    )
    from layerwise_nmt.grid.status import targeted_statuses

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


wildcard_constraints:
    experiment=r"(?!data$)[^/]+",
    seed=r"\d+",
    task=r"[^/]+",
    lang=r"[a-z]{2,3}",
    pair=r"[a-z]{2,3}-[a-z]{2,3}",
    split=r"[a-z]+\d*",
    lenpen=r"\d+(\.\d+)?",
    heldout=r"[A-Za-z0-9_-]+",
    vocab=r"joint|separate",
    paper=r"[^/.]+",
    figure=r"[^/.]+",
    row=r"\d+",


def _from_grid(method):
    """A grid question as a rule's input or params function: a config error (a target naming an experiment the
    config does not have, ...) stops Snakemake in one line, not an InputFunctionException and its traceback."""

    @functools.wraps(method)  # Snakemake reads the signature to pass only what the function takes
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except UserError as err:
            stop(err)

    return call


_inputs = grid.RuleInputs(config, cost=experiment_cost)

# targets
table_targets = _from_grid(_inputs.table_targets)
summary_inputs = _from_grid(_inputs.summary_inputs)
task_data_targets = _from_grid(_inputs.task_data_targets)
model_dir_targets = _from_grid(_inputs.model_dir_targets)
# wildcards → the config
task_of = _from_grid(_inputs.task_of)
experiment_of = _from_grid(_inputs.experiment_of)
run_dir = _from_grid(_inputs.run_dir)
data_dir = _from_grid(_inputs.data_dir)
# data.smk, preprocess.smk
own_file = _from_grid(_inputs.own_file)
raw_identity = _from_grid(_inputs.raw_identity)
fetch_args = _from_grid(_inputs.fetch_args)
extract_source = _from_grid(_inputs.extract_source)
extract_args = _from_grid(_inputs.extract_args)
get_part = _from_grid(_inputs.get_part)
tokenize_args = _from_grid(_inputs.tokenize_args)
reference_parts = _from_grid(_inputs.reference_parts)
concat_args = _from_grid(_inputs.concat_args)
assemble_spec = _from_grid(_inputs.assemble_spec)
assemble_inputs = _from_grid(_inputs.assemble_inputs)
train_texts = _from_grid(_inputs.train_texts)
bpe_learn_texts = _from_grid(_inputs.bpe_learn_texts)
bpe_codes = _from_grid(_inputs.bpe_codes)
vocab_params = _from_grid(_inputs.vocab_params)
# train.smk
train_inputs = _from_grid(_inputs.train_inputs)
warm_start_model = _from_grid(_inputs.warm_start_model)
train_priority = _from_grid(_inputs.train_priority)
train_spec = _from_grid(_inputs.train_spec)
export_spec = _from_grid(_inputs.export_spec)
average_settings = _from_grid(_inputs.average_settings)
export_inputs = _from_grid(_inputs.export_inputs)
# evaluate.smk
tokenized_bleu = _from_grid(_inputs.tokenized_bleu)
stacked_references = _from_grid(_inputs.stacked_references)
lenpen_grid = _from_grid(_inputs.lenpen_grid)
tunes_lenpen = _from_grid(_inputs.tunes_lenpen)
tuned_lenpen = _from_grid(_inputs.tuned_lenpen)
translate_flags = _from_grid(_inputs.translate_flags)
decoded_prefix = _from_grid(_inputs.decoded_prefix)
decoding_options = _from_grid(_inputs.decoding_options)
decoding_inputs = _from_grid(_inputs.decoding_inputs)
heldout_inputs = _from_grid(_inputs.heldout_inputs)
score_inputs = _from_grid(_inputs.score_inputs)
inspection_of = _from_grid(_inputs.inspection_of)
inspection_flags = _from_grid(_inputs.inspection_flags)
inspection_inputs = _from_grid(_inputs.inspection_inputs)
# report.smk
table_spec = _from_grid(_inputs.table_spec)
figure_spec = _from_grid(_inputs.figure_spec)
report_caption = _from_grid(_inputs.report_caption)
