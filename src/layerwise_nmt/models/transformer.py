"""The shared Transformer (Vaswani et al. 2017) every paper's variant builds on: post-norm as in the paper and
fairseq, or pre-norm as in tensor2tensor (`norm: pre`, which adds one final LayerNorm per stack).

Shapes: B batch, S source length, T target length, D d_model, H heads, V vocabulary, L layers. Batch-major throughout.

Where the variants plug in: `Encoder.forward` returns every layer's states (the embedding output is layer 0) and
the padding mask; each decoder layer i attends to the source view it is handed, `views[i]`. The baseline hands every
decoder layer the top encoder layer (`Seq2Seq.source_views`); cross-view decoding, layer fusion and aggregation
override that one method, or the encoder/decoder stacks, in their own modules.

`Model` is what the trainer, beam search and checkpoints use of every family (this one and LWC's single stack):
its initialisation, a training forward that returns the loss terms (`ModelOutput`), incremental decoding, and
defaults for what only some families have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from torch import Tensor, nn

from .config import FAIRSEQ_ARCHS, PRESETS, ModelConfig  # noqa: F401  (re-exported: their historical home)
from .dynamic_conv import ConvDecoderLayer, ConvEncoderLayer, LightDecoderLayer, LightEncoderLayer
from .layers import (
    KV,
    Embedding,
    FeedForward,
    Layer,
    MultiheadAttention,
    fairseq_init,
    fan_in_init,
    new_token_embedding,
)
from .layers import sinusoidal_positions  # noqa: F401  (re-exported)

# backbone name → (encoder layer class, decoder layer class): the convolutional ones of Wu et al. 2019
BACKBONES: dict[str, tuple[type, type]] = {
    "dynamic_conv": (ConvEncoderLayer, ConvDecoderLayer),
    "lightweight_conv": (LightEncoderLayer, LightDecoderLayer),
}


class Sublayers(Layer):
    """The residual wrapping every layer shares: post-norm LN(x + Drop(f(x))) or pre-norm x + Drop(f(LN(x)))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.dropout = nn.Dropout(config.dropout)

    def sublayer_input(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.pre_norm else x

    def residual(self, x: Tensor, y: Tensor, norm: nn.LayerNorm) -> Tensor:
        """x: the sublayer's input stream, y: its output f(·)."""
        return x + self.dropout(y) if self.pre_norm else norm(x + self.dropout(y))


class EncoderLayer(Sublayers):
    """Self-attention, then FFN, each wrapped by `residual` (post-norm by default)."""

    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__(config)
        self.attn, self.ffn = MultiheadAttention(config, self_attention=True), FeedForward(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.attend(x, mask)[0]

    def attend(
        self,
        x: Tensor,
        mask: Tensor,
        prefix: KV | None = None,
        cache: KV | None = None,
        prefix_mask: Tensor | None = None,
    ) -> tuple[Tensor, KV]:
        """The layer, also returning x's keys/values (cache grown); prefix: fixed keys/values placed first, masked
        by prefix_mask. LWC runs its shared [source; target] layers through this."""
        h, kv = self.attn(
            self.sublayer_input(x, self.norm1), mask=mask, cache=cache, prefix=prefix, prefix_mask=prefix_mask
        )
        x = self.residual(x, h, self.norm1)
        return self.residual(x, self.ffn(self.sublayer_input(x, self.norm2)), self.norm2), kv


class DecoderLayer(Sublayers):
    """Causal self-attention, cross-attention to this layer's source view, FFN."""

    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__(config)
        self.self_attn = MultiheadAttention(config, self_attention=True)
        self.cross_attn = MultiheadAttention(config, self_attention=False)
        self.ffn = FeedForward(config)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(config.d_model) for _ in range(3))

    def forward(
        self, x: Tensor, view: Tensor | KV, view_mask: Tensor, cache: KV | None = None
    ) -> tuple[Tensor, KV | None]:
        h, cache = self.self_attn(self.sublayer_input(x, self.norm1), causal=True, cache=cache)
        x = self.residual(x, h, self.norm1)
        x = self.add_source(x, self.cross_attn(self.sublayer_input(x, self.norm2), view, mask=view_mask)[0])
        return self.residual(x, self.ffn(self.sublayer_input(x, self.norm3)), self.norm3), cache

    def add_source(self, x: Tensor, context: Tensor) -> Tensor:
        """The residual step that merges the source context into the target states (context gates replace it)."""
        return self.residual(x, context, self.norm2)


def final_norm(config: ModelConfig) -> nn.LayerNorm | None:
    """Pre-norm stacks end with a LayerNorm (their layers' outputs are not normalised); post-norm ones need none."""
    return nn.LayerNorm(config.d_model) if config.norm == "pre" else None


# How a stack runs its layers (`Encoder.stack`, `Decoder.stack`): plain_stack, or a variant's aggregation
Stack = Callable[[Tensor, Any, int], tuple[list[Tensor], Tensor]]


def plain_stack(x: Tensor, layer, n: int) -> tuple[list[Tensor], Tensor]:
    """H^0 = x, H^l = LAYER_l(H^{l−1}), l = 1 … n → (H^0 … H^n, the stack's output H^n). `layer(i, h, below)`
    applies layer i to h; below = H^0 … H^i, the states so far. A variant that aggregates the layers (Dou et al.)
    replaces this function on its Encoder/Decoder (`stack`) and calls `layer` the same way."""
    states = [x]
    for i in range(n):
        states.append(layer(i, states[-1], states))
    return states, states[-1]


def layer_input(layer: Layer, h: Tensor, below: list[Tensor]) -> Tensor | list[Tensor]:
    """What a layer reads: h; a layer that also attends to the states below its input (`looks_back` = k: Dou et
    al.'s multi-layer attention) reads [h, H^{i−1}, …, H^{i−k+1}] (below = H^0 … H^i)."""
    k = layer.looks_back
    return h if k == 1 else [h] + [below[-1 - j] for j in range(1, k)]


def with_output(states: list[Tensor], out: Tensor) -> list[Tensor]:
    """A stack's states end with its output: H^0 … H^L, or H^0 … H^L, Ĥ where an aggregation made a new one."""
    return states if out is states[-1] else states + [out]


@dataclass
class EncoderOutput:
    # L+1 tensors (B, S, D); states[0] is the embedding output, states[-1] the stack's output: the top layer (after
    # the final LN of a pre-norm stack), or an aggregation of the layers appended after it (Dou et al.: L+2)
    states: list[Tensor]
    mask: Tensor  # (B, 1, 1, S) bool, True at real tokens


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding, layer: type | None = None):
        super().__init__()
        self.embed = Embedding(tokens, config)
        self.layers = nn.ModuleList((layer or EncoderLayer)(config, i) for i in range(config.encoder_layers))
        self.final_norm = final_norm(config)
        self.pad = config.pad
        self.stack: Stack = plain_stack

    def forward(self, src: Tensor) -> EncoderOutput:  # src (B, S)
        mask = (src != self.pad)[:, None, None, :]

        def layer(i: int, h: Tensor, below: list[Tensor]) -> Tensor:
            return self.layers[i](layer_input(cast(Layer, self.layers[i]), h, below), mask)

        states = with_output(*self.stack(self.embed(src), layer, len(self.layers)))
        if self.final_norm is not None:
            states[-1] = self.final_norm(states[-1])
        return EncoderOutput(states, mask)


@dataclass
class DecoderState:
    """Incremental decoding: each layer's self-attention K/V so far (a convolution's input window for conv
    backbones), one row per hypothesis, and its source view's K/V (computed once), one row per sentence."""

    views: list[KV]
    view_mask: Tensor
    self_kv: list
    step: int = 0

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        self.views, self.view_mask, self.self_kv = reorder_beams(
            rows, sentences, self.views, self.view_mask, self.self_kv
        )


def reorder_beams(
    rows: Tensor, sentences: Tensor | None, source: list[KV], source_mask: Tensor, growing: list[KV | None]
) -> tuple[list[KV], Tensor, list[KV | None]]:
    """A beam-search step's selection: each new hypothesis continues row `rows[i]` of the growing states; the
    per-sentence source states follow `sentences` (the sentences still decoded), None = the same sentences. The
    source stays one row per sentence, never copied per beam (attention reads it by sentence: by_sentence)."""
    if sentences is not None:
        source = [kv.reorder(sentences) for kv in source]
        source_mask = source_mask.index_select(0, sentences)
    return source, source_mask, [kv.reorder(rows) if kv is not None else None for kv in growing]


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding, layer: type = DecoderLayer):
        super().__init__()
        self.embed = Embedding(tokens, config)
        self.layers = nn.ModuleList(layer(config, i) for i in range(config.decoder_layers))
        self.final_norm = final_norm(config)
        self.stack: Stack = plain_stack

    def forward(self, prev: Tensor, views: list[Tensor], view_mask: Tensor) -> list[Tensor]:
        """prev (B, T) → every layer's states, L+1 tensors (B, T, D) (L+2 where an aggregation appends its
        output); layer i reads views[i]."""
        return self.run(self.embed(prev), views, view_mask, caches=None)

    def run(self, x: Tensor, views: list, view_mask: Tensor, caches: list | None) -> list[Tensor]:
        """The stack on embedded input x; caches (incremental decoding) are updated in place."""

        def layer(i: int, h: Tensor, below: list[Tensor]) -> Tensor:
            out, cache = self.layers[i](
                layer_input(cast(Layer, self.layers[i]), h, below),
                views[i],
                view_mask,
                cache=caches[i] if caches is not None else None,
            )
            if caches is not None:
                caches[i] = cache
            return out

        return self.normalise_top(with_output(*self.stack(x, layer, len(self.layers))))

    def normalise_top(self, states: list[Tensor]) -> list[Tensor]:
        if self.final_norm is not None:
            states[-1] = self.final_norm(states[-1])
        return states

    def start(self, views: list[Tensor], view_mask: Tensor) -> DecoderState:
        layers = cast("Iterable[Layer]", self.layers)  # ModuleList's items are typed as any Module
        kvs = [
            cast(MultiheadAttention, layer.cross_attn).project_kv(view)
            for layer, view in zip(layers, views, strict=True)
        ]
        growing = [layer.empty_cache(view) for layer, view in zip(layers, views, strict=True)]  # conv layers: windows
        return DecoderState(kvs, view_mask, growing)

    def step(self, last: Tensor, state: DecoderState) -> list[Tensor]:
        """last (B, 1): the newest token → its states in every layer, L+1 tensors (B, 1, D); state grows by one."""
        states = self.run(self.embed(last, offset=state.step), state.views, state.view_mask, state.self_kv)
        state.step += 1
        return states


@dataclass
class ModelOutput:
    """A training forward's result: the logits and what the trainer adds to their loss."""

    logits: Tensor  # (B, T, V)
    # a term the loss adds once per target token (× the pass's target tokens), e.g. Dou et al.'s −λ·L_div; None: none
    auxiliary_loss: Tensor | None = None
    # the term is a mean over the pass's positions rather than a sum over its tokens: merging an update's batches
    # into fewer passes (`micro_batch_tokens`) would change it
    per_pass: bool = False


class Model(nn.Module):
    """The contract every family keeps with the trainer, beam search and checkpoints."""

    config: ModelConfig

    def initialise(self) -> None:
        """Draw the weights as config.init says; `registry.build` calls it once, after construction. The
        constructors draw Xavier projections with zero biases (`xavier`); the other schemes redraw some of them, in
        the order of `modules()`."""
        if self.config.init == "fan_in":
            fan_in_init(self)
        elif self.config.init == "fairseq":
            fairseq_init(self, plain_ffn=self.config.backbone == "transformer")

    def forward(self, src: Tensor, prev: Tensor, full: bool = False) -> Tensor | ModelOutput:
        """src (B, S), prev (B, T) = </s> + target[:-1] → logits (B, T, V); full=True: the `ModelOutput` (the
        trainer's call, through DistributedDataParallel, which only forwards `forward`)."""
        output = self.outputs(src, prev)
        return output if full else output.logits

    def outputs(self, src: Tensor, prev: Tensor) -> ModelOutput:
        raise NotImplementedError

    # -- incremental decoding: the interface beam search uses ------------------------------------------------
    def start(self, src: Tensor):
        """The decoding state of a batch of sources, (B, S), with its `reorder(rows, sentences)`."""
        raise NotImplementedError

    def step(self, last: Tensor, state) -> Tensor:
        """last (B,) → next-token logits (B, V); the state grows by one position."""
        raise NotImplementedError

    # -- what only some families have -------------------------------------------------------------------------
    def merging_changes_loss(self) -> str | None:
        """Why merged passes (`micro_batch_tokens`) would change this model's loss, said after "model <Class>"; None:
        they would not (the loss is a sum over target tokens, each depending on its own sentence only)."""
        return None

    def warm_start_names(self, trained: dict[str, Tensor]) -> dict[str, Tensor]:
        """A trained model's tensors under this model's names, for a warm start (`checkpoint.warm_start`): the same
        names unless a family moved a baseline's tensor."""
        return trained

    def aggregation_nodes(self) -> list[nn.Module] | None:
        """The encoder's layer-aggregation nodes (Dou et al.'s AGG, whose shares a figure draws); None: none."""
        return None


class Seq2Seq(Model):
    """Encoder-decoder Transformer. Variants subclass it and override `source_views` (or the stacks)."""

    decoder_layer = DecoderLayer  # variants that change the decoder layer itself (e.g. context gates) override it

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        src_tokens = new_token_embedding(config.src_vocab, config)
        tgt_tokens = src_tokens if config.tie == "all" else new_token_embedding(config.tgt_vocab, config)
        encoder_layer, decoder_layer = BACKBONES.get(config.backbone, (EncoderLayer, self.decoder_layer))
        self.encoder = Encoder(config, src_tokens, encoder_layer)
        self.decoder = Decoder(config, tgt_tokens, decoder_layer)
        self.output = nn.Linear(config.d_model, config.tgt_vocab, bias=config.output_bias)
        if config.tie in ("decoder", "all"):
            self.output.weight = tgt_tokens.weight
        else:
            nn.init.normal_(self.output.weight, mean=0.0, std=config.d_model**-0.5)
        if config.output_bias:
            nn.init.zeros_(self.output.bias)

    def source_views(self, encoded: EncoderOutput) -> list[Tensor]:
        """Baseline: every decoder layer attends to the top encoder layer S_N."""
        return [encoded.states[-1]] * self.config.decoder_layers

    def predict(self, states: list[Tensor]) -> Tensor:
        """Every decoder layer's states (L+1 tensors (B, T, D)) → logits (B, T, V). Baseline: the top layer only,
        softmax(W_o z^L + b_o) (MLRF Eq. 2); decoder-side fusion overrides it."""
        return self.output(states[-1])

    def outputs(self, src: Tensor, prev: Tensor) -> ModelOutput:
        encoded = self.encoder(src)
        return ModelOutput(self.predict(self.decoder(prev, self.source_views(encoded), encoded.mask)))

    def start(self, src: Tensor) -> DecoderState:
        encoded = self.encoder(src)
        return self.decoder.start(self.source_views(encoded), encoded.mask)

    def step(self, last: Tensor, state: DecoderState) -> Tensor:
        """last (B,) → next-token logits (B, V)."""
        return self.predict(self.decoder.step(last[:, None], state))[:, 0]


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (tied matrices counted once), like fairseq's 'num. model params'."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
