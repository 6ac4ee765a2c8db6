"""The experiment grid as data: datasets → tasks → experiments, and papers → tables → rows.

One way to read the config for the workflow (workflow/rules/common.smk) and the `lwnmt` commands alike, importing
neither torch nor numpy, so that `snakemake -n` runs in an environment that holds only Snakemake:

    config_files    the files a user names, checked before anything is merged
    load            config files merged, the schema and the cross-references checked
    names           a wrong name's closest existing ones ("did you mean"), a YAML error's file and line
    local_corpus    a corpus in the user's own files (`local:`) as user_path + files, and its task's splits
    compare         a comparison by name (`compare:`) as experiments, one table and the length-bucket figure
    protocol        a study row as its paper's row scaled down: the differences and their reasons
    own_models      the config's own models (`models:`): names and paths, never imported here
    sources         where each raw file comes from: the user's directory, the data mirror, or a download
    tasks           a task's parts, languages and tokenizer options
    experiments     an experiment with its defaults; what translating with its model needs
    layout          the results/ paths
    papers          papers → tables (figures) → rows, and the metrics a table reads
    status          what can run, and why not
    reports         each table's and figure's rows resolved against the runs
    data_rule_inputs, rule_inputs
                    what the workflow's rules ask of the grid for a job's wildcards (RuleInputs)
    stage_checks    every experiment's stage settings through the classes that will read them
    budget_checks   what a run's stopping rules mean in epochs, and whether averaging and warm-up can work
    parameter_table the experiments' parameter counts beside the papers'
    pricing         `lwnmt plan`: each table's cost in GPU-hours
"""

from ..checkout import ROOT
from .experiments import STAGES, experiment, export_spec, trained_model
from .layout import bin_dir, data_path, experiment_dir, raw_path, run_dir, save_dir, score_file, training_summary
from .load import SCHEMA, check, check_schema, deep_update, expand, get, load, located, read, resolve_extends
from .load import schema_error, validate
from .papers import Row, measure_of, metrics_of, rows, split_of, tables
from .reports import figure_spec, paper_part, report_caption, table_spec
from .rule_inputs import RuleInputs
from .sources import (
    MIRROR_ENV,
    FileSource,
    checksum_of,
    download_key,
    download_path,
    download_spec,
    downloads,
    file_source,
    mirror_dir,
    mirrored,
    pair_member,
    unpinned_downloads,
    urls_of,
    where_from,
)
from .status import (
    Status,
    all_statuses,
    experiment_status,
    fetch_needs,
    row_statuses,
    rows_by_experiment,
    runnable_tasks,
    task_status,
)
from .tasks import (
    ARCHIVE_SUFFIXES,
    HELDOUT_ENV,
    SPLITS,
    find_part,
    heldout_dir,
    heldout_sets,
    pair,
    part_name,
    tokenize_options,
)

# The names the workflow's rule files and the commands read as `grid.<name>`.
__all__ = [
    "ROOT",
    "STAGES",
    "experiment",
    "export_spec",
    "trained_model",
    "bin_dir",
    "data_path",
    "experiment_dir",
    "raw_path",
    "run_dir",
    "save_dir",
    "score_file",
    "training_summary",
    "SCHEMA",
    "deep_update",
    "get",
    "load",
    "located",
    "read",
    "resolve_extends",
    "schema_error",
    "validate",
    "check",
    "check_schema",
    "expand",
    "Row",
    "measure_of",
    "metrics_of",
    "rows",
    "split_of",
    "tables",
    "figure_spec",
    "paper_part",
    "report_caption",
    "table_spec",
    "RuleInputs",
    "MIRROR_ENV",
    "FileSource",
    "checksum_of",
    "download_key",
    "download_path",
    "download_spec",
    "downloads",
    "file_source",
    "mirror_dir",
    "mirrored",
    "pair_member",
    "unpinned_downloads",
    "urls_of",
    "where_from",
    "Status",
    "all_statuses",
    "experiment_status",
    "fetch_needs",
    "row_statuses",
    "rows_by_experiment",
    "runnable_tasks",
    "task_status",
    "ARCHIVE_SUFFIXES",
    "HELDOUT_ENV",
    "SPLITS",
    "find_part",
    "heldout_dir",
    "heldout_sets",
    "pair",
    "part_name",
    "tokenize_options",
]
