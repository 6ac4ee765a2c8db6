# layerwise-nmt: one DAG from raw corpora to the papers' tables. Rules are thin: each calls `lwnmt <subcommand>`.
# Full reproduction:  snakemake --cores all --use-conda
# CPU demo:           snakemake --cores all --configfile config/demo.yaml

from snakemake.utils import min_version

min_version("9.0")

configfile: f"{workflow.basedir}/config.yaml"
report: "workflow/report/workflow.rst"  # snakemake --report report.zip: every table and figure, by paper

include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/preprocess.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"

# On a cluster these run where Snakemake runs, not as one sbatch each: downloads (compute nodes often have no
# internet), extraction of one file from an archive, and the seconds-long scoring and report jobs.
localrules:
    all,
    tables,
    fetch,
    extract,
    score,
    score_lenpen,
    pick_lenpen,
    table,
    summary,
    check_reference,


rule all:
    input:
        [target for task in TARGET_TASKS for target in task_data_targets(task)],
        table_targets(),
        model_dir_targets(),  # results/<task>/<experiment>/seed<k>/model_dir: lwnmt translate --model DIR
    default_target: True


# Only the report (`snakemake tables`): every targeted table, figure and the summary, without the data targets of
# `all`; what scripts/study_gpu.sh collect builds from a GPU machine's scores where no data was prepared.
rule tables:
    input:
        table_targets(),
