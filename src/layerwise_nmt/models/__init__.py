"""Model architectures: one shared Transformer plus one small module per paper, chosen by name."""

from . import context_gate, coordination, cross_view, deep_repr, dynamic_conv, fusion, transformer  # noqa: F401
from .registry import MODELS, build, model_class  # noqa: F401
