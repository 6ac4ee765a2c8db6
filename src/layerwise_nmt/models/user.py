"""A model from outside the package, named in the config by module and class (fairseq's --user-dir, with the name
given in the config instead of a decorator):

    models:
      layer_mix: {class: "layer_mix:LayerMixTransformer", user_dir: examples/layer_mix}
    experiments:
      demo.layer_mix: {extends: demo.transformer, model: layer_mix}

The class is imported only by the processes that build a model (training, export, translate, `lwnmt params` and
`lwnmt plan`); the workflow's DAG reads the name and nothing more, so `snakemake -n` needs neither torch nor the
user's module. A model file records the class it was built from (`model_class`); loading one imports that module only
when the user names its code (--user-dir FOLDER or --user-module MODULE), never on the file's word alone.

The contract (docs/usage.md, "Your own method"): a subclass of `Model` (usually of `Seq2Seq`, the shared
Transformer) with a `config_class`, its settings (a dataclass subclass of `ModelConfig`), a training forward
(`outputs`, or `forward` itself) and incremental decoding (`start`, `step`).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from ..job_specs import TrainSpec

# what a model class must define beyond what Model gives every family, and what each part is for
CONTRACT = (
    ("outputs", "the training forward: outputs(src, prev) -> ModelOutput(logits, auxiliary_loss)"),
    ("start", "beam search's first step: start(src) -> a decoding state with reorder(rows, sentences)"),
    ("step", "beam search's next step: step(last, state) -> next-token logits"),
)


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


@dataclass(frozen=True)
class UserModel:
    """The model `name` of class `target` ("module:Class"), imported from `user_dir` (first on sys.path) when given;
    `where` is how errors name it: the config key, or the model file that records it."""

    name: str
    target: str
    user_dir: str | None = None
    where: str = ""

    @classmethod
    def from_config(cls, config: dict, name: str) -> UserModel | None:
        """The config's `models:` entry `name` (None for a built-in model)."""
        entry = (config.get("models") or {}).get(name)
        return cls.from_entry(name, entry) if entry is not None else None

    @classmethod
    def from_entry(cls, name: str, entry: dict) -> UserModel:
        """A `models:` entry as the grid hands it to a job ({class, user_dir}: own_models.user_model)."""
        return cls(name, entry["class"], entry.get("user_dir"), f"config key models/{name}/class")

    @classmethod
    def from_spec(cls, spec: TrainSpec | dict) -> UserModel | None:
        """The train spec's `user_model` (grid.RuleInputs.train_spec writes it for a model of `models:`)."""
        spec = TrainSpec.of(spec)
        entry = spec.user_model
        if not entry:
            return None
        return cls(spec.model, entry["class"], entry.get("user_dir"), f"model {spec.model} ({entry['class']})")

    def to_spec(self) -> dict:
        return {"class": self.target, **({"user_dir": self.user_dir} if self.user_dir else {})}

    def load(self) -> type:
        """The class, imported and checked against the contract; a one-line UserError naming `where` otherwise."""
        if self.user_dir is not None:
            folder = Path(self.user_dir).expanduser()
            if not folder.is_dir():
                raise UserError(
                    f"{self.where}: user_dir {self.user_dir}: no such folder (relative paths are read from "
                    f"the working directory, {Path.cwd()})"
                )
            if str(folder.resolve()) not in sys.path:
                sys.path.insert(0, str(folder.resolve()))
        module_name, class_name = self.target.split(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:  # a SyntaxError or a failing import inside it too: the user's code, in one line
            raise UserError(
                f"{self.where}: cannot import module {module_name!r}"
                f"{f' from {self.user_dir}' if self.user_dir else ''}: {one_line(err)}"
            ) from None
        cls = getattr(module, class_name, None)
        if cls is None:
            raise UserError(
                f"{self.where}: module {module_name} ({getattr(module, '__file__', '?')}) has no {class_name!r}"
            )
        gap = contract_gap(cls)
        if gap:
            raise UserError(f'{self.where}: class {self.target} {gap} (docs/usage.md, "Your own method")')
        return cls


def contract_gap(cls) -> str | None:
    """What `cls` lacks of the model contract, in words; None when it keeps it."""
    from .config import ModelConfig
    from .transformer import Model

    if not isinstance(cls, type) or not issubclass(cls, Model):
        return (
            "is not a subclass of layerwise_nmt.models.transformer.Model (or of Seq2Seq, the shared Transformer), "
            "whose methods the trainer, beam search and checkpoints call"
        )
    settings = getattr(cls, "config_class", None)
    if not (isinstance(settings, type) and issubclass(settings, ModelConfig) and dataclasses.is_dataclass(settings)):
        return (
            "has no config_class: its settings, a @dataclass subclass of layerwise_nmt.models.config.ModelConfig "
            "(the config's arch keys)"
        )
    for method, what in CONTRACT:
        overridden = getattr(cls, method) is not getattr(Model, method)
        if method == "outputs" and cls.forward is not Model.forward:
            overridden = True
        if not overridden:
            return f"lacks {method}: {what}"
    return None


@dataclass(frozen=True)
class UserCode:
    """The code a user named for loading model files (--user-dir FOLDER, --user-module MODULE): the only code a model
    file's `model_class` may import."""

    user_dir: str | None = None
    modules: tuple[str, ...] = ()

    def model_of(self, state: dict, path) -> UserModel | None:
        """The user model a loaded checkpoint records (None: a built-in one); a one-line UserError when its code
        was not named."""
        target = state.get("model_class")
        if not target:
            return None
        name, module = state.get("model_name"), target.split(":")[0]
        if self.user_dir is None and not {module, module.split(".")[0]} & set(self.modules):
            raise UserError(
                f"{path}: model {name!r} is {target}, code from outside the package, and loading a model "
                f"never imports code on its own: name it with --user-dir FOLDER (the folder holding "
                f"module {module}) or --user-module {module}"
            )
        assert name is not None  # every checkpoint records its model_name
        return UserModel(name, target, self.user_dir, f"{path}: model {name!r} ({target})")


def recorded(spec: TrainSpec) -> dict:
    """What a checkpoint of a training `spec` records of a user model: its class (never the folder, which is the
    machine's); nothing for a built-in one."""
    return {"model_class": spec.user_model["class"]} if spec.user_model else {}
