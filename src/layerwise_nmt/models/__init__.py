"""Model architectures: one shared Transformer plus one small module per paper, chosen by name (registry.MODELS); a
model from outside the package is named in the config by module and class (user.py)."""

from .registry import MODELS, build, config_class, count_built, model_class, settings_of  # noqa: F401
from .user import UserCode, UserModel  # noqa: F401
