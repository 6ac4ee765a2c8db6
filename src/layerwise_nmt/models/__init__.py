"""Model architectures: one shared Transformer plus one small module per paper, chosen by name (configs.MODELS)."""

from .configs import MODELS  # noqa: F401
from .registry import build, model_class  # noqa: F401
