"""Layer-wise coordination (He et al. 2018, NeurIPS): source and target run through ONE stack of N layers.

    u = [x_1 … x_n </s>, <sos> y_1 … y_m]          (source part S = n+1 tokens, target part T = m+1)
    e_k = E[u_k]·sqrt(d) + PE(pos_k) + L_lang(k)    (§3: resettable positions, target restarts at 0; language emb.)
    h^l = FFN(MixedAttn(h^{l-1}; M))                post-norm sublayers, parameters shared by both halves
    M(i, j) = 0 iff j < n ∨ j ≤ i + n               (Eq. 3: target row i sees all source and targets ≤ i;
                                                     source rows see the source only)
    logits = h^N_target · E^T                       (one table for source input, target input and output)

So target position i in layer l attends to layer l−1 of the source: decoder layer l reads encoder layer l−1.
Decoding: the source half is computed once and each layer's source keys/values are kept as a static prefix of
that layer's attention; the target keys/values grow step by step (`CoordinationState`).

Status: the shared-parameter model of Table 1 (this module). The Table 3 ablations (no sharing, no mixed
attention, no language/position embedding) and the §5.4 context-gate baseline are issue #4's remaining work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import UserError
from .registry import register
from .transformer import KV, Embedding, EncoderLayer, ModelConfig, new_token_embedding, reorder_beams


@dataclass
class CoordinationConfig(ModelConfig):
    layers: int = 14  # shared layers (LWC-small: 14 ≈ the parameters of a 6+6 Transformer-small)
    tie: str = "all"  # the paper's single token table (its 19.07M count implies it)
    language_embeddings: bool = True  # L_src, L_tgt (Table 3 ablation: off)

    def check(self) -> None:
        super().check()
        if self.tie != "all":
            raise UserError("model lwc shares one token table between source, target and output: tie must be 'all'")


@dataclass
class CoordinationState:
    source: list[KV]  # per layer: the source half's keys/values (B, H, S, Dh), fixed
    source_mask: Tensor  # (B, 1, 1, S) True at real source tokens
    target: list[KV | None]  # per layer: target keys/values so far
    step: int = 0

    def reorder(self, order: Tensor) -> None:
        self.source, self.source_mask, self.target = reorder_beams(order, self.source, self.source_mask, self.target)


@register("lwc")
class LayerWiseCoordination(nn.Module):
    config_class = CoordinationConfig

    def __init__(self, config: CoordinationConfig):
        super().__init__()
        self.config = config
        self.tokens = new_token_embedding(config.src_vocab, config)
        self.embed = Embedding(self.tokens, config)  # positions restart at 0 for the target (offset per half)
        self.language = nn.Parameter(torch.zeros(2, config.d_model)) if config.language_embeddings else None
        if self.language is not None:
            nn.init.normal_(self.language, std=config.d_model**-0.5)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))  # shared by both halves

    def embed_half(self, ids: Tensor, half: int, offset: int = 0) -> Tensor:
        x = self.embed(ids, offset=offset)
        return x + self.language[half] if self.language is not None else x

    def forward(self, src: Tensor, prev: Tensor) -> Tensor:
        """src (B, S) right-padded, ends with </s>; prev (B, T) starts with <sos> (= </s>) → logits (B, T, V)."""
        S, T = src.size(1), prev.size(1)
        x = torch.cat([self.embed_half(src, 0), self.embed_half(prev, 1)], dim=1)  # (B, S+T, D)
        mask = mixed_attention_mask(src != self.config.pad, T)
        for layer in self.layers:
            x, _ = layer.attend(x, mask)
        return x[:, S:] @ self.tokens.weight.t()

    def start(self, src: Tensor) -> CoordinationState:
        source_mask = (src != self.config.pad)[:, None, None, :]
        x, kvs = self.embed_half(src, 0), []
        for layer in self.layers:  # the source half never sees the target: compute it once
            x, kv = layer.attend(x, source_mask)
            kvs.append(kv)
        return CoordinationState(kvs, source_mask, [None] * len(self.layers))

    def step(self, last: Tensor, state: CoordinationState) -> Tensor:
        """last (B,) → next-token logits (B, V)."""
        x = self.embed_half(last[:, None], 1, offset=state.step)
        mask = torch.cat([state.source_mask, state.source_mask.new_ones(*state.source_mask.shape[:3],
                                                                          state.step + 1)], dim=-1)
        for i, layer in enumerate(self.layers):
            x, state.target[i] = layer.attend(x, mask, prefix=state.source[i], cache=state.target[i])
        state.step += 1
        return (x @ self.tokens.weight.t())[:, 0]


def mixed_attention_mask(source_real: Tensor, T: int) -> Tensor:
    """Eq. 3 with padding: (B, S) bool → (B, 1, S+T, S+T) bool, True = may attend."""
    B, S = source_real.shape
    device = source_real.device
    keys_src = source_real[:, None, None, :].expand(B, 1, S + T, S)  # every row sees the real source keys
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    keys_tgt = torch.zeros(S + T, T, dtype=torch.bool, device=device)
    keys_tgt[S:] = causal  # target rows see targets ≤ i; source rows never see the target
    return torch.cat([keys_src, keys_tgt[None, None].expand(B, 1, S + T, T)], dim=-1)
