"""layerwise-nmt: four papers on the lower layers of NMT Transformers, reproduced as one workflow."""

__version__ = "0.1.0"


# The exit status of a UserError that a retry with the same inputs meets again (sysexits.h's EX_CONFIG): the
# workflow's training jobs, which Snakemake retries for preemption, and the own-model check of its DAG
CONFIG_ERROR = 78


class UserError(Exception):
    """Bad input or configuration: reported as one line naming the file/key and what was expected."""
