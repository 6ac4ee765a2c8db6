"""Model architectures: one shared Transformer plus one small module per paper, chosen by name."""

from . import context_gate, coordination, fusion, transformer  # noqa: F401  (register their models)
from .registry import MODELS, build, model_class  # noqa: F401
