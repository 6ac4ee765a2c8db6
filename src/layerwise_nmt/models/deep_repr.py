"""Exploiting deep representations (Dou et al. 2018, EMNLP): aggregate the layers of each stack.

H^0 = embeddings, H^l = LAYER(H^{l−1}), l = 1 … L (L = 6). The stack's output Ĥ replaces H^L: as the decoder's
memory (encoder side) or as the softmax input (decoder side).

    dense          H^l = LAYER(H^{l−1}) + Σ_{i<l} H^i  (i ≥ 1), Ĥ = H^L                       (Eq. 4)
                   dense_norm: H^l = LN(LAYER(H^{l−1}) + Σ_{i<l} H^i), l ≥ 2, as Eq. 1 wraps residuals
    linear         Ĥ = Σ_l W_l H^l, W_l ∈ R^{d×d}                                              (Eq. 5)
                   factorised reading: Ĥ = W_o Σ_l W_l H^l, W_l ∈ R^{d_ff×d}, W_o ∈ R^{d×d_ff}  (linear_form)
    iterative      Ĥ^1 = H^1, Ĥ^l = AGG(H^l, Ĥ^{l−1}), Ĥ = Ĥ^L; beside the backbone           (Eqs. 6-7)
    hierarchical   Ĥ^1 = AGG(H^1, H^2), Ĥ^i = AGG(H^{2i−1}, H^{2i}, Ĥ^{i−1}), Ĥ = Ĥ^{L/2}; each node feeds
                   the next sub-tree: H^{2i+1} = LAYER(Ĥ^i)                                    (§3.2, CNN-like tree)
                   (odd L, e.g. the 3-layer demo: the last node is AGG(H^L, Ĥ^{prev}), an AGG₂)
    AGG(x, y[, z]) = LN(FF([x; y; z]) + x + y + z), FF = Linear(n·d → d_ff) → σ → Linear(d_ff → d)
    multi-layer attention (k): in layers l > k, C_{−i} = ATT_i(H^{l−1}, H^{l−i}) for i = 1 … k, and
                   C^l = AGG(C_{−1}, …, C_{−k}) replaces the self-attention output             (Eq. 8)
    diversity      L_div = mean_l mean_n (1 − cos²(H^l_n, H^{l+1}_n)), maximised: loss −= λ·L_div (Eqs. 9-10)

The printed increments over Transformer-Base pin the readings (tests/test_deep_repr.py): d_ff-sized AGG hidden
layers; iterative = 5 AGG₂ per stack (+31.5M), hierarchical = 1 AGG₂ + 2 AGG₃ (+23.1M); multi-layer attention only
in layers l > k, each extra attended layer with its own full attention (+33.6M for k=2, +37.8M for k=3). Eq. 5
literally adds 6·d² per stack (+3.1M); the paper prints +14.7M, which it cannot give. The rows implement the
equation; `linear_form: factorised` is the reading that gives the printed count: still linear in the layers, each
W_l maps to d_ff and one shared W_o maps back, 7·d·d_ff per stack = +14.68M for Base.
Table 4 options: agg_residual all|top|none, agg_function sigmoid|relu|attention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import DeepConfig
from .layers import KV, MultiheadAttention, attention
from .transformer import DecoderLayer, EncoderLayer, ModelOutput, Seq2Seq


class Aggregation(nn.Module):
    """AGG over n inputs of (…, D) → (…, D)."""

    def __init__(self, n: int, config: DeepConfig):
        super().__init__()
        d, self.residual, self.function = config.d_model, config.agg_residual, config.agg_function
        if self.function == "attention":  # a Transformer self-attention over the n inputs at each position
            self.attn = MultiheadAttention(config, self_attention=True)
        else:
            self.ff = nn.Sequential(
                nn.Linear(n * d, config.d_ff),
                nn.Sigmoid() if self.function == "sigmoid" else nn.ReLU(),
                nn.Linear(config.d_ff, d),
            )
        self.norm = nn.LayerNorm(d)

    def forward(self, *inputs: Tensor) -> Tensor:
        if self.function == "attention":
            stacked = torch.stack(inputs, dim=-2)  # (…, n, D): attend across the inputs
            shape = stacked.shape
            mixed = self.attn(stacked.reshape(-1, *shape[-2:]))[0].reshape(shape).mean(dim=-2)
        else:
            mixed = self.ff(torch.cat(inputs, dim=-1))
        residual = {"all": sum(inputs), "top": inputs[0], "none": 0}[self.residual]  # inputs[0]: the newest layer
        return self.norm(mixed + residual)

    def shares(self) -> Tensor:
        """Dou Eq. 11: s_j = Σ|W_j| / Σ_j' Σ|W_j'| over the first FF matrix's block for each input j."""
        first = cast(nn.Linear, self.ff[0])  # Sequential's items are typed as any Module
        blocks = first.weight.abs().split(first.in_features // self.n_inputs, dim=1)
        totals = torch.stack([b.sum() for b in blocks])
        return totals / totals.sum()

    @property
    def n_inputs(self) -> int:
        return cast(nn.Linear, self.ff[0]).in_features // self.norm.normalized_shape[0]


class StackAggregation(nn.Module):
    """Runs one stack under an aggregation strategy. `layer(i, x)` applies backbone layer i (0-based) to x."""

    def __init__(self, kind: str, layers: int, config: DeepConfig):
        super().__init__()
        self.kind = kind
        if kind == "linear":  # W_l starts as I/L (the mean of the layers), also through the factorised d_ff
            d = config.d_model
            rank = d if config.linear_form == "square" else config.d_ff
            self.weights = nn.Parameter(start_as_identity(torch.empty(layers, rank, d), 1 / layers))  # W_l: (L, R, D)
            self.project = (
                nn.Parameter(start_as_identity(torch.empty(d, rank), 1.0))  # W_o: (D, R)
                if config.linear_form == "factorised"
                else None
            )
        self.norms = (
            nn.ModuleList(nn.LayerNorm(config.d_model) for _ in range(layers - 1))  # H^2 … H^L
            if kind == "dense" and config.dense_norm
            else None
        )
        self.nodes: nn.ModuleList | None = None  # the AGG nodes of the iterative and hierarchical aggregations
        if kind == "iterative":
            self.nodes = nn.ModuleList(Aggregation(2, config) for _ in range(layers - 1))
        if kind == "hierarchical":  # a sub-tree per 2 layers; with odd L the last one holds H^L alone (AGG₂)
            sizes = [min(2, layers - 2 * i) + (i > 0) for i in range((layers + 1) // 2)]
            self.nodes = nn.ModuleList(Aggregation(n, config) for n in sizes)

    def forward(self, x: Tensor, layer, layers: int) -> tuple[list[Tensor], Tensor]:
        """x = H^0 → (backbone states H^0 … H^L, the stack's output Ĥ); `layer(i, h, below)` as in plain_stack."""
        states = [x]

        def advance(h: Tensor) -> Tensor:  # H^{i+1} = LAYER_i(h), appended to the states so far
            states.append(layer(len(states) - 1, h, states))
            return states[-1]

        if self.kind == "hierarchical":
            assert self.nodes is not None
            node_out = None
            for i, node in enumerate(self.nodes):
                block = [advance(states[-1] if node_out is None else node_out)]  # H^{2i+1} = LAYER(Ĥ^i)
                if 2 * i + 1 < layers:
                    block.append(advance(block[0]))
                node_out = node(*reversed(block), *([node_out] if node_out is not None else []))
            assert node_out is not None  # a stack has at least one layer, so at least one node
            return states, node_out
        for i in range(layers):
            h = layer(i, states[-1], states)
            if self.kind == "dense" and i > 0:
                h = h + sum(states[1:], torch.zeros_like(h))  # + Σ_{i<l} H^i, without the embeddings
                if self.norms is not None:
                    h = self.norms[i - 1](h)
            states.append(h)
        if self.kind == "linear":
            mixed = torch.einsum("lbtd,lrd->btr", torch.stack(states[1:]), self.weights)  # (B, T, R)
            return states, mixed if self.project is None else mixed @ self.project.t()
        if self.kind == "iterative":
            assert self.nodes is not None
            out = states[1]
            for node, h in zip(self.nodes, states[2:], strict=True):
                out = node(h, out)
            return states, out
        return states, states[-1]


def start_as_identity(w: Tensor, scale: float) -> Tensor:
    """(…, A, B): scale·I in the leading square block, the rest small and random (zero blocks of W_l and W_o
    would stay zero: each one's gradient is a product with the other)."""
    m = min(w.shape[-2:])
    with torch.no_grad():
        w.normal_(std=0.01 * scale)
        w[..., :m, :m] = scale * torch.eye(m)
    return w


@dataclass
class KVList:
    """A multi-layer attention's keys/values, one KV per attended layer (its decoding cache)."""

    kvs: list[KV]

    def __getitem__(self, i: int) -> KV:
        return self.kvs[i]

    def reorder(self, order: Tensor) -> KVList:
        return KVList([kv.reorder(order) for kv in self.kvs])


class MultiLayerAttention(nn.Module):
    """Eq. 8: C_{−i} = ATT_i(Q from H^{l−1}, K/V from H^{l−i}), i = 1 … k; C = AGG(C_{−1}, …, C_{−k})."""

    def __init__(self, config: DeepConfig, k: int):
        super().__init__()
        self.dropout = config.attention_dropout
        self.attns = nn.ModuleList(MultiheadAttention(config, self_attention=True) for _ in range(k))
        self.agg = Aggregation(k, config)

    def forward(
        self, lower: list[Tensor], mask: Tensor | None, causal: bool, caches: KVList | None = None
    ) -> tuple[Tensor, KVList]:
        """lower: [H^{l−1}, H^{l−2}, …, H^{l−k}] at the new positions; caches: their K/V at earlier positions."""
        query, contexts, grown = lower[0], [], []
        attns = cast("Iterable[MultiheadAttention]", self.attns)  # ModuleList's items are typed as any Module
        for i, (attn, h) in enumerate(zip(attns, lower, strict=True)):
            q, kv = attn.project_q(query), attn.project_kv(h)
            cache = caches[i] if caches is not None else None
            if cache is not None:  # incremental decoding: this step's keys after the earlier ones
                kv = KV(torch.cat([cache.k, kv.k], dim=2), torch.cat([cache.v, kv.v], dim=2))
            grown.append(kv)
            y = attention(q, kv.k, kv.v, mask, causal and cache is None, self.dropout if self.training else 0.0)
            B, H, T, Dh = y.shape
            contexts.append(attn.out(y.transpose(1, 2).reshape(B, T, H * Dh)))
        return self.agg(*contexts), KVList(grown)


class MLAEncoderLayer(EncoderLayer):
    def __init__(self, config: DeepConfig, k: int):
        super().__init__(config)
        del self.attn  # replaced by the k attentions of Eq. 8
        self.mla = MultiLayerAttention(config, k)
        self.looks_back = k  # reads [H^{l−1}, …, H^{l−k}] (transformer.layer_input)

    def forward(self, lower: Tensor | list[Tensor], mask: Tensor) -> Tensor:  # a list: looks_back > 1
        x = self.norm1(lower[0] + self.dropout(self.mla(lower, mask, causal=False)[0]))
        return self.norm2(x + self.dropout(self.ffn(x)))


class MLADecoderLayer(DecoderLayer):
    def __init__(self, config: DeepConfig, k: int):
        super().__init__(config)
        del self.self_attn  # replaced by the k attentions of Eq. 8
        self.mla = MultiLayerAttention(config, k)
        self.looks_back = k  # reads [H^{l−1}, …, H^{l−k}] (transformer.layer_input)

    def forward(
        self,
        lower: Tensor | list[Tensor],
        view,
        view_mask: Tensor,  # a list: looks_back > 1
        cache: KV | KVList | None = None,
    ):
        h, cache = self.mla(lower, None, causal=True, caches=cache)
        x = self.norm1(lower[0] + self.dropout(h))
        x = self.add_source(x, self.cross_attn(x, view, mask=view_mask)[0])
        return self.norm3(x + self.dropout(self.ffn(x))), cache


def diversity(states: list[Tensor], keep: Tensor) -> Tensor:
    """Eq. 10 over adjacent backbone layers: mean over l and real positions of 1 − cos²(H^l_n, H^{l+1}_n)."""
    terms = [
        (1 - F.cosine_similarity(a.float(), b.float(), dim=-1) ** 2)[keep].mean()
        for a, b in zip(states[1:-1], states[2:], strict=True)
    ]
    return torch.stack(terms).mean()


class DeepTransformer(Seq2Seq):
    config: DeepConfig

    def __init__(self, config: DeepConfig):
        super().__init__(config)
        sides = {"encoder", "decoder"} if config.apply_to == "both" else {config.apply_to}
        k = config.mla_k
        for side, stack, mla in (
            ("encoder", self.encoder, MLAEncoderLayer),
            ("decoder", self.decoder, MLADecoderLayer),
        ):
            if k and side in sides:  # layers l > k only: every attended layer is a real layer (the counts say so)
                for i in range(k, len(stack.layers)):
                    stack.layers[i] = mla(config, k)
        self.encoder_agg = StackAggregation(
            config.aggregation if "encoder" in sides else "none", config.encoder_layers, config
        )
        self.decoder_agg = StackAggregation(
            config.aggregation if "decoder" in sides else "none", config.decoder_layers, config
        )
        self.input_bias = nn.Parameter(torch.zeros(config.d_model)) if config.input_bias else None
        self.auxiliary_loss: Tensor | None = None  # −λ·L_div of the latest training forward (ModelOutput's too)
        # the shared stacks run under the aggregations (bound methods: the modules stay registered here only)
        self.encoder.stack, self.decoder.stack = self.encoder_stack, self.decoder_agg.__call__

    def warm_start_names(self, trained: dict[str, Tensor]) -> dict[str, Tensor]:
        """A trained baseline's tensors under this model's names (Dou et al. start every model from the baseline):
        a multi-layer attention layer's ATT_1 (Eq. 8, i = 1: queries and keys from H^{l−1}) is the baseline
        layer's own self-attention; its ATT_2 … ATT_k keep their default initialisation."""
        renamed = {}
        for name, tensor in trained.items():
            match = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(attn|self_attn)\.(.+)", name)
            if match and isinstance(
                getattr(self, match.group(1)).layers[int(match.group(2))], (MLAEncoderLayer, MLADecoderLayer)
            ):
                name = f"{match.group(1)}.layers.{match.group(2)}.mla.attns.0.{match.group(4)}"
            renamed[name] = tensor
        return renamed

    def encoder_stack(self, x: Tensor, layer, layers: int) -> tuple[list[Tensor], Tensor]:
        """The encoder's `stack`: THUMT's learned input bias, then the encoder's aggregation."""
        return self.encoder_agg(x if self.input_bias is None else x + self.input_bias, layer, layers)

    def outputs(self, src: Tensor, prev: Tensor) -> ModelOutput:
        encoded = self.encoder(src)
        states = self.decoder(prev, self.source_views(encoded), encoded.mask)
        self.auxiliary_loss = None
        if self.training and self.config.diversity:  # maximise L_div (Eq. 9): the loss gets −λ·L_div
            encoder = encoded.states[: self.config.encoder_layers + 1]
            decoder = states[: self.config.decoder_layers + 1]
            l_div = (diversity(encoder, encoded.mask[:, 0, 0]) + diversity(decoder, prev != self.config.pad)) / 2
            self.auxiliary_loss = -self.config.diversity * l_div
        return ModelOutput(self.predict(states), self.auxiliary_loss, per_pass=True)

    def merging_changes_loss(self) -> str | None:
        """L_div (Eq. 10) is a mean over the pass's positions, weighted by the pass's target tokens."""
        if not self.config.diversity:
            return None
        return f"with diversity={self.config.diversity} adds a mean over each pass's positions to the loss"

    def aggregation_nodes(self) -> list[nn.Module] | None:
        return list(self.encoder_agg.nodes) if self.encoder_agg.nodes is not None else None
