"""Exact parameter counts in closed form, from a model's settings alone: no torch, nothing built.

`count(model, config)` sums the same terms the modules in models/ allocate (tests/test_model_sizes.py checks the
sum against the built model for every experiment, reading and option). Notation: d = d_model, f = d_ff, H = heads,
V_s, V_t the vocabularies, N, M the encoder and decoder layers.

    Linear(a → b)      a·b + b (a·b without its bias)          LayerNorm       2·d
    attention          Q, K, V and output projections: 4·d² + 4·d (self- and cross-attention alike)
    FFN                Linear(d → f) + Linear(f → d) = 2·d·f + d + f
    encoder layer      attention + FFN + 2 LayerNorms; a convolution block (kernel K) in place of the attention
    decoder layer      self-attention + cross-attention + FFN + 3 LayerNorms (same substitution)
    convolution block  Linear(d → 2·d, or d without GLU) + kernels (dynamic: d·H·K, no bias; lightweight: H·K)
                       + a d-bias + Linear(d → d)
    embeddings         tie none: (V_s + 2·V_t)·d; decoder: (V_s + V_t)·d; all: V_s·d; + V_t with output_bias
    pre-norm           + one LayerNorm per stack
Family terms are in each `_<family>` function below, with the paper equation they come from.

`parameter_count(model, settings)` does the same from a settings dict (the config's `arch` plus vocabulary sizes):
the model's config dataclass fills the defaults, resolves presets and checks the values (a UserError as building
would give); an unknown model name gives None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONVOLUTIONS = {"dynamic_conv": True, "lightweight_conv": False}  # backbone → kernels predicted per position


def linear(a: int, b: int, bias: bool = True) -> int:
    return a * b + (b if bias else 0)


def layer_norm(c: Any) -> int:
    return 2 * c.d_model


def attention(c: Any) -> int:
    """MultiheadAttention: a fused Q/K/V (or Q and K/V) projection and the output projection, all with biases."""
    return linear(c.d_model, 3 * c.d_model) + linear(c.d_model, c.d_model)


def feed_forward(c: Any) -> int:
    return linear(c.d_model, c.d_ff) + linear(c.d_ff, c.d_model)


def convolution(c: Any, kernel: int) -> int:
    """Wu et al.'s block: input projection (GLU: d → 2d), kernels, the convolution's bias, output projection."""
    d = c.d_model
    kernels = linear(d, c.heads * kernel, bias=False) if CONVOLUTIONS[c.backbone] else c.heads * kernel
    return linear(d, 2 * d if c.conv_glu else d) + kernels + d + linear(d, d)


def transformer_encoder_layer(c: Any) -> int:
    """A Transformer encoder layer whatever the backbone (LWC's levels, Dou et al.'s multi-layer attention)."""
    return attention(c) + feed_forward(c) + 2 * layer_norm(c)


def transformer_decoder_layer(c: Any) -> int:
    return 2 * attention(c) + feed_forward(c) + 3 * layer_norm(c)


def encoder_layer(c: Any, index: int) -> int:
    """Layer `index` of the backbone: a convolution block replaces the self-attention of a convolutional one."""
    if c.backbone == "transformer":
        return transformer_encoder_layer(c)
    return transformer_encoder_layer(c) - attention(c) + convolution(c, c.kernel_sizes[index])


def decoder_layer(c: Any, index: int) -> int:
    if c.backbone == "transformer":
        return transformer_decoder_layer(c)
    return transformer_decoder_layer(c) - attention(c) + convolution(c, c.kernel_sizes[index])


def final_norm(c: Any) -> int:
    return layer_norm(c) if c.norm == "pre" else 0


def embeddings(c: Any) -> int:
    """Token tables and the output projection (tied to the target table unless tie: none), its optional bias."""
    d = c.d_model
    tables = {"none": c.src_vocab + 2 * c.tgt_vocab, "decoder": c.src_vocab + c.tgt_vocab, "all": c.src_vocab}
    return tables[c.tie] * d + (c.tgt_vocab if c.output_bias else 0)


def seq2seq(c: Any, encoder: list[int] | None = None, decoder: list[int] | None = None) -> int:
    """The shared Transformer (models/transformer.py Seq2Seq); encoder/decoder: per-layer counts that replace the
    backbone's (a variant that swaps some layers)."""
    encoder = encoder if encoder is not None else [encoder_layer(c, i) for i in range(c.encoder_layers)]
    decoder = decoder if decoder is not None else [decoder_layer(c, i) for i in range(c.decoder_layers)]
    return embeddings(c) + sum(encoder) + sum(decoder) + 2 * final_norm(c)


def _transformer(c: Any) -> int:
    return seq2seq(c)


def _context_gate(c: Any) -> int:
    """Tu et al.'s gate per decoder layer: w_x, w_c, b, each a d-vector."""
    return seq2seq(c) + c.decoder_layers * 3 * c.d_model


def _cross_view(c: Any) -> int:
    """Liu et al.: FMA's W_ij, b_ij (N·M of each), AMA's v_ij, and one LayerNorm per decoder layer under Eq. 7."""
    N, M, d = c.encoder_layers, c.decoder_layers, c.d_model
    views = {"fma": M * N * (d * d + d), "ama": M * N * d}.get(c.strategy, 0)
    return seq2seq(c) + views + (M * layer_norm(c) if c.soft_integration else 0)


def _lwc(c: Any) -> int:
    """He et al.: one token table, language embeddings L_src, L_tgt, `layers` Transformer encoder layers (twice
    without sharing), each with a LayerNorm for its separate source attention when mixed attention is off; the
    output is the token table itself (no bias), a pre-norm stack ends with one LayerNorm on the target half."""
    level = transformer_encoder_layer(c) + (0 if c.mixed_attention else layer_norm(c))
    stacks = 1 if c.share_layers else 2
    language = 2 * c.d_model if c.language_embeddings else 0
    return c.src_vocab * c.d_model + language + stacks * c.layers * level + final_norm(c)


def aggregation(c: Any, n: int) -> int:
    """Dou et al.'s AGG over n inputs: FF(n·d → f → d) (or a self-attention across them), then a LayerNorm."""
    mix = attention(c) if c.agg_function == "attention" else linear(n * c.d_model, c.d_ff) + linear(c.d_ff, c.d_model)
    return mix + layer_norm(c)


def stack_aggregation(c: Any, kind: str, layers: int) -> int:
    """Eq. 4 (dense, LayerNorms with dense_norm), Eq. 5 (linear: square W_l or the factorised reading), Eqs. 6-7
    (iterative: L−1 AGG₂), §3.2 (hierarchical: AGG₂ then AGG₃ per pair of layers, the last AGG₂ for odd L)."""
    d = c.d_model
    if kind == "linear":
        return layers * d * d if c.linear_form == "square" else layers * c.d_ff * d + d * c.d_ff
    if kind == "dense":
        return (layers - 1) * layer_norm(c) if c.dense_norm else 0
    if kind == "iterative":
        return (layers - 1) * aggregation(c, 2)
    if kind == "hierarchical":
        return sum(aggregation(c, min(2, layers - 2 * i) + (i > 0)) for i in range((layers + 1) // 2))
    return 0


def _deep(c: Any) -> int:
    """Dou et al.: the aggregation on the sides it applies to, multi-layer attention (k attentions and an AGG_k in
    place of the self-attention) in layers l > k of those sides, THUMT's input bias."""
    sides = {"encoder", "decoder"} if c.apply_to == "both" else {c.apply_to}
    k = c.mla_k
    mla = k * attention(c) + aggregation(c, k) if k else 0
    encoder = [encoder_layer(c, i) for i in range(c.encoder_layers)]
    decoder = [decoder_layer(c, i) for i in range(c.decoder_layers)]
    for side, layers, plain in (
        ("encoder", encoder, transformer_encoder_layer(c)),
        ("decoder", decoder, transformer_decoder_layer(c)),
    ):
        if k and side in sides:
            layers[k:] = [plain - attention(c) + mla] * len(layers[k:])
    aggregations = sum(
        stack_aggregation(c, c.aggregation if side in sides else "none", layers)
        for side, layers in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers))
    )
    return seq2seq(c, encoder, decoder) + aggregations + (c.d_model if c.input_bias else 0)


def layer_fusion(c: Any, kind: str, layers: int) -> int:
    """Wang et al.'s φ over one side's L+1 states (L without z^0; AVG has no parameters): SA's W_1 (shared, per
    layer or per hop) and W_2, then the fusion FNN over its inputs, all without biases, and a LayerNorm."""
    if kind in ("none", "avg"):
        return 0
    d = c.d_model
    inputs = layers + 1 if c.word_embedding else layers
    total = 0
    if kind == "sa":
        copies = inputs if c.independent_w1 else c.n_hop if c.w1_per_hop else 1
        total += copies * d * c.d_a + linear(c.d_a, c.n_hop, bias=False)
        inputs = c.n_hop
    return total + linear(inputs * d, c.d_f, bias=False) + linear(c.d_f, d, bias=False) + layer_norm(c)


def _mlrf(c: Any) -> int:
    """Wang et al.: encoder and decoder fusion, and the layer embedding E (L+1 rows, shared by both sides) when a
    weighted fusion (FNN, SA) reads it."""
    weighted = {c.encoder_fusion, c.decoder_fusion} & {"fnn", "sa"}
    layer_embedding = (c.encoder_layers + 1) * c.d_model if c.layer_embedding and weighted else 0
    return (
        seq2seq(c)
        + layer_embedding
        + layer_fusion(c, c.encoder_fusion, c.encoder_layers)
        + layer_fusion(c, c.decoder_fusion, c.decoder_layers)
    )


FAMILIES: dict[str, Callable[[Any], int]] = {
    "transformer": _transformer,
    "lwc": _lwc,
    "cross_view": _cross_view,
    "deep": _deep,
    "mlrf": _mlrf,
    "context_gate": _context_gate,
}


def count(model: str, config: Any) -> int | None:
    """The parameter count of `model` built from `config` (its config dataclass instance, or any object with the
    same attributes); None for a model with no closed form here."""
    family = FAMILIES.get(model)
    return family(config) if family is not None else None


def parameter_count(model: str, settings: dict | Any) -> int | None:
    """The parameter count of `model` built from `settings`: a settings dict (checked and completed by the model's
    config class, which raises the UserError building would) or the config dataclass instance itself."""
    from . import MODELS  # the config table: torch-free

    if model not in MODELS or model not in FAMILIES:
        return None
    if isinstance(settings, dict):
        settings = MODELS[model].config_class.from_dict(dict(settings))
    return count(model, settings)
