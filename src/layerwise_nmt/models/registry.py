"""Config model names → model classes. Each model module registers its class with `@register("name")`;
`models/__init__.py` imports every model module explicitly (no directory scanning)."""

from __future__ import annotations

from torch import nn

from .. import UserError

MODELS: dict[str, type] = {}


def register(name: str):
    def wrap(cls: type) -> type:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        MODELS[name] = cls
        cls.model_name = name
        return cls

    return wrap


def model_class(name: str) -> type:
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS)) or 'none yet'}")
    return MODELS[name]


def build(name: str, settings: dict):
    """The model `name` with its config built from `settings` (unknown keys are an error naming them)."""
    cls = model_class(name)
    model = cls(cls.config_class.from_dict(settings))
    if model.config.init == "fan_in":
        fan_in_init(model)
    elif model.config.init == "fairseq":
        fairseq_init(model)
    return model


def fan_in_init(model: nn.Module) -> None:
    """Every Linear's weight and bias ~ U(±1/sqrt(fan_in)) (PyTorch's own Linear default); an output projection
    tied to a token embedding keeps the embedding's N(0, d^-0.5)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            bound = module.in_features**-0.5
            if id(module.weight) not in embeddings:
                nn.init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                nn.init.uniform_(module.bias, -bound, bound)


def fairseq_init(model: nn.Module) -> None:
    """fairseq 0.12's Transformer initialisation, which `xavier` simplifies: each of Q, K, V is Xavier-uniform with
    gain 1/sqrt(2) and its bias keeps nn.Linear's U(±1/sqrt(fan_in)) (MultiheadAttention.reset_parameters); the
    attention output is Xavier with a zero bias (as in `xavier`); the Transformer FFN's fc1/fc2 are plain nn.Linear,
    weights and biases U(±1/sqrt(fan_in)). The convolutional backbones keep Xavier FFNs with zero biases, which is
    what fairseq's lightconv.py Linear gives them."""
    from .transformer import FeedForward, MultiheadAttention

    plain_ffn = model.config.backbone == "transformer"
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            for linear in (getattr(module, name) for name in ("qkv", "q", "kv") if hasattr(module, name)):
                d = linear.in_features
                for block in linear.weight.split(d):  # (D, D) each: fairseq's q_proj, k_proj, v_proj
                    nn.init.xavier_uniform_(block, gain=2**-0.5)
                nn.init.uniform_(linear.bias, -(d**-0.5), d**-0.5)
        elif isinstance(module, FeedForward) and plain_ffn:
            for linear in (module.fc1, module.fc2):
                bound = linear.in_features**-0.5
                nn.init.uniform_(linear.weight, -bound, bound)
                nn.init.uniform_(linear.bias, -bound, bound)
