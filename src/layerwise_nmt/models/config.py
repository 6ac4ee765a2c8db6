"""Every model's settings (the table of models, config name → these classes and the model classes, is registry.py's).

Torch-free, so that a workflow driver without torch checks an experiment's architecture (`MODELS[name].config_class`,
grid/stage_checks.py) and counts its parameters (sizes.py); `registry.build` imports a model's module only when
it builds one. Each family's options are explained in its own module (coordination.py, cross_view.py, deep_repr.py,
fusion.py, context_gate.py, dynamic_conv.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import UserError
from ..settings import Settings, setting

# the convolutional backbones of models/dynamic_conv.py (Wu et al. 2019), besides the Transformer's own layers
CONV_BACKBONES = ("dynamic_conv", "lightweight_conv")

# name → (d_model, d_ff, heads); layer counts and everything else are separate keys.
PRESETS = {
    "small": (256, 1024, 4),  # t2t transformer_small (LWC T1/T3/T4), MLRF's De-En model
    "iwslt": (512, 1024, 4),  # fairseq transformer_iwslt_de_en
    "base": (512, 2048, 8),
    "big": (1024, 4096, 16),
}
# fairseq's arch names → the preset with its sizes (`lwnmt train --arch transformer_iwslt_de_en`); all are 6+6
FAIRSEQ_ARCHS = {
    "transformer": "base",
    "transformer_wmt_en_de": "base",
    "transformer_iwslt_de_en": "iwslt",
    "transformer_wmt_en_de_big": "big",
    "transformer_vaswani_wmt_en_de_big": "big",
    "transformer_vaswani_wmt_en_fr_big": "big",
}


@dataclass
class ModelConfig(Settings):
    """Everything needed to rebuild a model; saved in every checkpoint."""

    key_noun = "model setting"

    src_vocab: int = setting(0, ge=0)
    tgt_vocab: int = setting(0, ge=0)
    pad: int = setting(1, ge=0)  # fairseq Dictionary: <s>=0 <pad>=1 </s>=2 <unk>=3
    eos: int = setting(2, ge=0)
    preset: str | None = None  # fills d_model/d_ff/heads unless given explicitly
    d_model: int = setting(512, ge=1)
    d_ff: int = setting(2048, ge=1)
    heads: int = setting(8, ge=1)
    encoder_layers: int = setting(6, ge=1)
    decoder_layers: int = setting(6, ge=1)
    dropout: float = setting(0.1, ge=0, lt=1)  # residual and embedding dropout
    attention_dropout: float = setting(0.0, ge=0, lt=1)
    activation_dropout: float = setting(0.0, ge=0, lt=1)
    # none: three matrices; decoder: target input = output projection (fairseq share_decoder_input_output_embed);
    # all: one matrix for source, target and output (needs a joint vocabulary; LWC's 19.07M count implies it).
    tie: str = "decoder"
    output_bias: bool = False  # MLRF's Eq. 2 has b_o
    scale_embedding: bool = True  # multiply token embeddings by sqrt(D), as Vaswani et al. and fairseq do
    position_embeddings: bool = True  # sinusoidal positions (LWC Table 3 ablates them)
    # vaswani: sin/cos interleaved by dimension, first token at position 0 (Vaswani et al. §3.5, tensor2tensor);
    # fairseq: [sin | cos] halves, frequencies 10000^(-i/(D/2-1)), first token at position pad+1 (fairseq's
    # SinusoidalPositionalEmbedding; set by `lwnmt import-fairseq`, so that its models decode as they were trained).
    sinusoid: str = "vaswani"
    # xavier: Xavier-uniform projections (Q, K, V fused), zero biases; fairseq: fairseq 0.12's exactly (Q, K, V
    # Xavier with gain 1/sqrt(2) and U(±1/sqrt(D)) biases, FFN at nn.Linear's default; models/layers.py);
    # fan_in: every Linear U(±1/sqrt(fan_in)) for weights and biases (MLRF §4.2). Token embeddings: N(0, d^-0.5).
    init: str = "xavier"
    # transformer, or a convolutional backbone of CONV_BACKBONES (dynamic_conv, lightweight_conv: Wu et al.
    # 2019) whose blocks keep the encoder-decoder attention, so every cross-view strategy applies to it too.
    backbone: str = "transformer"
    kernel_sizes: tuple[int, ...] = setting((3, 7, 15, 31, 31, 31, 31), ge=1)  # conv backbones: kernel width per layer
    weight_dropout: float = setting(0.1, ge=0, lt=1)  # conv backbones: dropout on the normalised kernel weights
    conv_glu: bool = True  # conv backbones: GLU on the input projection (fairseq's IWSLT recipe turns it off)
    # conv backbones: dropout on each convolution block's input, before the input projection (fairseq lightconv's
    # input_dropout: 0.1 in its WMT architectures, 0.0 in lightconv_iwslt_de_en); the residual path is not dropped.
    input_dropout: float = setting(0.0, ge=0, lt=1)
    max_positions: int = setting(1024, ge=1)
    # post: x = LN(x + Drop(f(x))) (Vaswani et al., fairseq, THUMT); pre: x = x + Drop(f(LN(x))) and a final LN on
    # each stack's top states (tensor2tensor's transformer_base/small since v1.2, i.e. LWC's code base).
    norm: str = "post"

    @classmethod
    def prepare(cls, values: dict) -> dict:
        if "kernel_sizes" in values:
            values["kernel_sizes"] = tuple(values["kernel_sizes"])
        preset = values.get("preset")
        if preset is not None:
            if preset not in PRESETS:
                raise UserError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
            for key, value in zip(("d_model", "d_ff", "heads"), PRESETS[preset], strict=True):
                values.setdefault(key, value)
        return values

    def check(self) -> None:
        if self.backbone != "transformer" and self.backbone not in CONV_BACKBONES:
            raise UserError(f"backbone={self.backbone!r}; expected transformer or one of {', '.join(CONV_BACKBONES)}")
        if self.backbone != "transformer" and max(self.encoder_layers, self.decoder_layers) > len(self.kernel_sizes):
            raise UserError(
                f"kernel_sizes has {len(self.kernel_sizes)} entries for up to "
                f"{max(self.encoder_layers, self.decoder_layers)} layers"
            )
        if self.norm not in ("post", "pre"):
            raise UserError(f"norm={self.norm!r}; expected post or pre")
        if self.norm == "pre" and self.backbone != "transformer":
            raise UserError(f"norm=pre is written for the Transformer layers, not backbone={self.backbone}")
        if self.sinusoid not in ("vaswani", "fairseq"):
            raise UserError(f"sinusoid={self.sinusoid!r}; expected vaswani or fairseq")
        if self.init not in ("xavier", "fairseq", "fan_in"):
            raise UserError(f"init={self.init!r}; expected xavier, fairseq or fan_in")
        if self.tie not in ("none", "decoder", "all"):
            raise UserError(f"tie={self.tie!r}; expected none, decoder or all")
        if self.tie == "all" and self.src_vocab != self.tgt_vocab:
            raise UserError(
                f"tie=all needs a joint vocabulary, got {self.src_vocab} source vs {self.tgt_vocab} "
                f"target symbols (use the task's bin-joint data)"
            )
        if self.d_model % self.heads:
            raise UserError(f"d_model={self.d_model} is not divisible by heads={self.heads}")

    def other_readings(self) -> dict[str, dict]:
        """Readings of an ambiguous paper detail that this model can also build, e.g. the one that gives a printed
        parameter count: name → setting overrides (`lwnmt params` counts each beside the paper's number)."""
        return {}

    def require_post_norm(self, model: str, why: str) -> None:
        """For variants that read the lower layers' outputs, which only a post-norm stack normalises."""
        if self.norm != "post":
            raise UserError(f"model {model} needs norm=post: {why}")

    def to_dict(self) -> dict:
        return asdict(self)


# Layer-wise coordination (He et al. 2018): coordination.py
@dataclass
class CoordinationConfig(ModelConfig):
    layers: int = setting(14, ge=1)  # levels (LWC-small: 14 shared layers ≈ the parameters of a 6+6 Transformer-small)
    tie: str = "all"  # the paper's single token table (its 19.07M count implies it)
    language_embeddings: bool = True  # L_src, L_tgt (Table 3 ablation: off)
    share_layers: bool = True  # one parameter set per level for both halves (Table 3 ablation: off, with 7 layers)
    mixed_attention: bool = True  # Eq. 3 (Table 3 ablation: off = self-attention, then source attention)

    def check(self) -> None:
        super().check()
        if self.tie != "all":
            raise UserError("model lwc shares one token table between source, target and output: tie must be 'all'")


# Context gates (Tu et al. 2017): context_gate.py
@dataclass
class ContextGateConfig(ModelConfig):
    def check(self) -> None:
        super().check()
        if self.backbone != "transformer":
            raise UserError("context gates are written for the Transformer decoder layer: backbone must be transformer")


# Layer-wise cross-view decoding (Liu et al. 2020): cross_view.py
STRATEGIES = ("top", "gca", "gpa", "fga", "fma", "ama")  # top = the baseline's S_N for every layer


@dataclass
class CrossViewConfig(ModelConfig):
    strategy: str = "gca"
    soft_integration: bool = False  # Eq. 7

    def check(self) -> None:
        super().check()
        self.require_post_norm(
            "cross_view", "its views S_j are encoder layer outputs, layer-normalised as in fairseq's post-norm stacks"
        )
        if self.strategy not in STRATEGIES:
            raise UserError(f"strategy={self.strategy!r}; expected one of {', '.join(STRATEGIES)}")
        if self.strategy in ("gca", "gpa") and self.encoder_layers != self.decoder_layers:
            raise UserError(
                f"strategy {self.strategy} pairs decoder layer i with one encoder layer: needs as many "
                f"encoder as decoder layers ({self.encoder_layers} vs {self.decoder_layers})"
            )


# Exploiting deep representations (Dou et al. 2018): deep_repr.py
AGGREGATIONS = ("none", "dense", "linear", "iterative", "hierarchical")


@dataclass
class DeepConfig(ModelConfig):
    aggregation: str = "none"
    mla_k: int = setting(0, ge=0)  # multi-layer attention over the k layers below (0 = off; the paper uses 2 and 3)
    diversity: float = setting(0.0, ge=0)  # λ of the layer-diversity term (the paper: 1.0)
    apply_to: str = "both"  # encoder | decoder | both (Table 3)
    agg_residual: str = "all"  # all | top | none (Table 4)
    agg_function: str = "sigmoid"  # sigmoid | relu | attention (Table 4)
    linear_form: str = "square"  # square: Eq. 5's W_l ∈ R^{d×d} | factorised: via d_ff (the printed +14.7M)
    # dense: Eq. 4's sum doubles the state's scale per layer (Σ_{i≤l} H^i = 2·Σ_{i<l} H^i + LAYER); true adds a
    # LayerNorm after each sum (2·d per layer, the printed +0.0M still holds)
    dense_norm: bool = False
    tie: str = "none"  # THUMT: source, target and softmax matrices untied, no softmax bias
    input_bias: bool = True  # THUMT adds a learned d-vector to the encoder input

    def check(self) -> None:
        super().check()
        self.require_post_norm("deep", "it aggregates the layer outputs H^l of THUMT's post-norm stacks (Eq. 1-2)")
        for key, allowed in (
            ("aggregation", AGGREGATIONS),
            ("apply_to", ("encoder", "decoder", "both")),
            ("agg_residual", ("all", "top", "none")),
            ("agg_function", ("sigmoid", "relu", "attention")),
            ("linear_form", ("square", "factorised")),
        ):
            if getattr(self, key) not in allowed:
                raise UserError(f"{key}={getattr(self, key)!r}; expected one of {', '.join(allowed)}")
        if self.diversity and min(self.encoder_layers, self.decoder_layers) < 2:  # Eq. 10 compares adjacent layers
            raise UserError(
                f"diversity={self.diversity} needs at least 2 encoder and 2 decoder layers (Eq. 10 "
                f"compares adjacent layers); got {self.encoder_layers} and {self.decoder_layers}"
            )

    def other_readings(self) -> dict[str, dict]:
        if self.aggregation == "dense":
            return {f"dense_norm={str(not self.dense_norm).lower()}": {"dense_norm": not self.dense_norm}}
        if self.aggregation == "linear":
            other = "factorised" if self.linear_form == "square" else "square"
            return {f"linear_form={other}": {"linear_form": other}}
        return {}


# Multi-layer representation fusion (Wang et al. 2018): fusion.py
FUSIONS = ("none", "avg", "fnn", "sa")


@dataclass
class FusionConfig(ModelConfig):
    encoder_fusion: str = "none"  # none | avg | fnn | sa
    decoder_fusion: str = "none"
    n_hop: int = setting(4, ge=1)
    d_a: int = setting(1024, ge=1)  # SA's inner size (W_1: d × d_a)
    d_f: int = setting(512, ge=1)  # the fusion FNN's hidden size
    independent_w1: bool = False  # Table 3 "+ indep. W_1": one W_1 per layer
    w1_per_hop: bool = False  # one W_1 per hop (h): the reading that gives T2's printed 13.47M for Dec-SA, 6 hops
    word_embedding: bool = True  # fuse z^0 too (Table 4 ablation: off)
    layer_embedding: bool = True  # z̃^l = z^l + E^l, E shared by encoder and decoder (Table 4 ablation: off)
    tie: str = "none"  # the backbone MLRF's counts imply: separate embeddings, untied output layer with bias
    output_bias: bool = True
    init: str = "fan_in"

    def check(self) -> None:
        super().check()
        self.require_post_norm("mlrf", "it fuses the layer outputs z^l of the paper's post-norm stacks")
        for side in ("encoder_fusion", "decoder_fusion"):
            if getattr(self, side) not in FUSIONS:
                raise UserError(f"{side}={getattr(self, side)!r}; expected one of {', '.join(FUSIONS)}")
        if self.independent_w1 and self.w1_per_hop:
            raise UserError("independent_w1 (a W_1 per layer) and w1_per_hop (a W_1 per hop) exclude each other")
        if self.encoder_layers != self.decoder_layers and self.layer_embedding:
            raise UserError("the layer embedding is shared by encoder and decoder: equal layer counts needed")

    def other_readings(self) -> dict[str, dict]:
        if "sa" not in (self.encoder_fusion, self.decoder_fusion) or self.independent_w1:
            return {}
        return {f"w1_per_hop={str(not self.w1_per_hop).lower()}": {"w1_per_hop": not self.w1_per_hop}}
