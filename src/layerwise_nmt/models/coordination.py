"""Layer-wise coordination (He et al. 2018, NeurIPS): source and target run through ONE stack of N layers.

    u = [x_1 … x_n </s>, <sos> y_1 … y_m]          (source part S = n+1 tokens, target part T = m+1)
    e_k = E[u_k]·sqrt(d) + PE(pos_k) + L_lang(k)    (§3: resettable positions, target restarts at 0; language emb.)
    h^l = FFN(MixedAttn(h^{l-1}; M))                sublayers shared by both halves; pre-norm (t2t's, `norm: pre`,
                                                    with a final LN on the target half) or post-norm
    M(i, j) = 0 iff j < n ∨ j ≤ i + n               (Eq. 3: target row i sees all source and targets ≤ i;
                                                     source rows see the source only)
    logits = h^N_target · E^T                       (one table for source input, target input and output)

Because source rows never see the target (Eq. 3), the stack is run as two passes per layer that are exactly the
masked attention over the concatenation: the source half alone, then the target half with that layer's source
keys/values as a fixed prefix of its own (causal) keys. Target position i in layer l therefore reads layer l−1 of
the source: decoder layer l reads encoder layer l−1. Decoding computes the source pass once and grows only the
target keys/values (`CoordinationState`); it costs S² + T(S+T) attention scores instead of (S+T)².

Table 3 ablations (config flags):
- share_layers=false, layers=7: every level has a source layer and a target layer with their own parameters; the
  target layer applies its own K/V projections to the source states of level l−1 (mixed attention kept).
- mixed_attention=false: the target half runs causal self-attention, then a separate attention to the same-level
  source states, "as usual" (§5.3). The paper prints 19.07M for it, which a separate cross-attention cannot give
  (22.75M at 14 layers). Our reading: the second attention reuses the layer's own Q/K/V/O projections (the layer is
  still one parameter set serving both roles) and only adds its LayerNorm: +2·d per layer, 19,077,632 parameters
  at V=31.3K with the rows' pre-norm stacks (19,077,120 post-norm, which has no final LayerNorm; 19.08M either way).
- language_embeddings=false: no L_src/L_tgt (−2·d = −512 parameters, the paper's count is unchanged at 2 decimals).
- position_embeddings=false (ModelConfig): no PE at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from .config import CoordinationConfig
from .layers import KV, Embedding, new_token_embedding
from .transformer import EncoderLayer, Model, ModelOutput, final_norm, reorder_beams


class CoordinationLayer(EncoderLayer):
    """One level. As a source layer it is the plain EncoderLayer (`attend`); `target` runs the target half."""

    def __init__(self, config: CoordinationConfig):
        super().__init__(config)
        self.source_norm = None if config.mixed_attention else nn.LayerNorm(config.d_model)

    def target(self, x: Tensor, source: KV, source_mask: Tensor, cache: KV | None = None) -> tuple[Tensor, KV]:
        """x (B, T, D): level l−1 target states; source: this layer's K/V of level l−1 source states;
        cache: the earlier target positions' K/V (incremental decoding) → (B, T, D), K/V grown."""
        T = x.size(1)
        past = cache.k.size(2) if cache is not None else 0
        causal = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(past)[None, None]
        if self.source_norm is None:  # Eq. 3: one softmax over the source keys and the target keys ≤ i
            return self.attend(x, causal, prefix=source, cache=cache, prefix_mask=source_mask)
        # w/o mixed attention: two attentions with the same projections
        h, cache = self.attn(self.sublayer_input(x, self.norm1), mask=causal, cache=cache)
        x = self.residual(x, h, self.norm1)
        context = self.attn(self.sublayer_input(x, self.source_norm), memory=source, mask=source_mask)[0]
        x = self.residual(x, context, self.source_norm)
        return self.residual(x, self.ffn(self.sublayer_input(x, self.norm2)), self.norm2), cache


@dataclass
class CoordinationState:
    source: list[KV]  # per level: the target layer's keys/values of the level l−1 source states (n, H, S, Dh)
    source_mask: Tensor  # (n, 1, 1, S) True at real source tokens; one row per sentence, as `source`
    target: list[KV | None]  # per level: target keys/values so far, one row per hypothesis
    step: int = 0

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        self.source, self.source_mask, self.target = reorder_beams(
            rows, sentences, self.source, self.source_mask, self.target
        )


class LayerWiseCoordination(Model):
    def __init__(self, config: CoordinationConfig):
        super().__init__()
        self.config = config
        self.tokens = new_token_embedding(config.src_vocab, config)
        self.embed = Embedding(self.tokens, config)  # positions restart at 0 for the target (offset per half)
        self.language = nn.Parameter(torch.zeros(2, config.d_model)) if config.language_embeddings else None
        if self.language is not None:
            nn.init.normal_(self.language, std=config.d_model**-0.5)
        self.layers = nn.ModuleList(CoordinationLayer(config) for _ in range(config.layers))
        self.target_layers = (
            None if config.share_layers else nn.ModuleList(CoordinationLayer(config) for _ in range(config.layers))
        )
        self.final_norm = final_norm(config)  # pre-norm: on the target half's top states, before the output

    def target_stack(self) -> Iterable[CoordinationLayer]:
        stack = self.layers if self.target_layers is None else self.target_layers
        return cast("Iterable[CoordinationLayer]", stack)  # ModuleList's items are typed as any Module

    def embed_half(self, ids: Tensor, half: int, offset: int = 0) -> Tensor:
        x = self.embed(ids, offset=offset)
        return x + self.language[half] if self.language is not None else x

    def encode(self, src: Tensor) -> tuple[list[KV], list[Tensor], Tensor]:
        """The source half, which never sees the target: src (B, S) → per level the target layer's K/V of the
        level l−1 source states, the states of every level (L+1 tensors (B, S, D)) and the mask (B, 1, 1, S)."""
        mask = (src != self.config.pad)[:, None, None, :]
        states, kvs = [self.embed_half(src, 0)], []
        for layer, target_layer in zip(
            cast("Iterable[CoordinationLayer]", self.layers), self.target_stack(), strict=True
        ):
            x, kv = layer.attend(states[-1], mask)
            kvs.append(
                kv
                if target_layer is layer
                else target_layer.attn.project_kv(target_layer.sublayer_input(states[-1], target_layer.norm1))
            )
            states.append(x)
        return kvs, states, mask

    def outputs(self, src: Tensor, prev: Tensor) -> ModelOutput:
        """src (B, S) right-padded, ends with </s>; prev (B, T) starts with <sos> (= </s>) → logits (B, T, V)."""
        source, _, mask = self.encode(src)
        x = self.embed_half(prev, 1)
        for layer, kv in zip(self.target_stack(), source, strict=True):
            x, _ = layer.target(x, kv, mask)
        return ModelOutput(self.logits(x))

    def logits(self, x: Tensor) -> Tensor:  # top target states (B, T, D) → (B, T, V)
        return (self.final_norm(x) if self.final_norm is not None else x) @ self.tokens.weight.t()

    def start(self, src: Tensor) -> CoordinationState:
        source, _, mask = self.encode(src)
        return CoordinationState(source, mask, [None] * len(source))

    def step(self, last: Tensor, state: CoordinationState) -> Tensor:
        """last (B,) → next-token logits (B, V)."""
        x = self.embed_half(last[:, None], 1, offset=state.step)
        for i, layer in enumerate(self.target_stack()):
            x, state.target[i] = layer.target(x, state.source[i], state.source_mask, cache=state.target[i])
        state.step += 1
        return self.logits(x)[:, 0]
