"""layerwise-nmt: four papers on the lower layers of NMT Transformers, reproduced as one workflow."""

__version__ = "0.1.0"


class UserError(Exception):
    """Bad input or configuration: reported as one line naming the file/key and what was expected."""
