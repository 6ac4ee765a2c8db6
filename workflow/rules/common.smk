# Binds the package to Snakemake's objects (workflow, config, logger): what happens when the Snakefile is read (the
# jobs' environment, the config's checks, the start-of-run notes) is layerwise_nmt/snakemake_glue/snakefile.py, and
# every input and params function the rules call is the grid's (grid/rule_inputs.py), tested without Snakemake.

import sys
from pathlib import Path

SOURCES = Path(workflow.current_basedir).parents[1] / "src"  # the checkout's src/, however Snakemake was started
sys.path.insert(0, str(SOURCES))
from layerwise_nmt import grid, rehearsal
from layerwise_nmt.grid.rule_inputs import LENPEN_TUNING_SPLIT
from layerwise_nmt.snakemake_glue import snakefile

snakefile.prepare_jobs(SOURCES, workflow.is_main_process)
shell.prefix(snakefile.job_shell_prefix(SOURCES, shell.get_executable()))  # the package for conda jobs too
TARGET_TASKS = snakefile.check_config(config, workflow, logger, rehearse=rehearsal.apply)  # fills schema defaults
GPUS_PER_JOB = config["gpus_per_job"]  # per training job; 0 = CPU
if workflow.is_main_process:
    snakefile.announce(config, logger)
# R.train_inputs, R.task_of, ...: the methods of grid.RuleInputs (grid/rule_inputs.py, grid/data_rule_inputs.py),
# bound to this config, each stopping Snakemake in one line on a config error
R = snakefile.rule_inputs(config)


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
