"""Model architectures: one shared Transformer plus one small module per paper, chosen by name."""

from . import transformer  # noqa: F401  (registers "transformer")
from .registry import MODELS, build, model_class  # noqa: F401
