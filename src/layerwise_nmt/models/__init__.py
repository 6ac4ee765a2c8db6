"""Model architectures: one shared Transformer plus one small module per paper, chosen by name."""

from . import coordination, transformer  # noqa: F401  (register "lwc", "transformer")
from .registry import MODELS, build, model_class  # noqa: F401
