"""The Transformer's building blocks, shared by every model and backbone: token and position embeddings,
multi-head attention (with the caches incremental decoding keeps), the feed-forward block, what a stack asks of a
layer (`Layer`), and the initialisation schemes a config's `init` names.

Shapes: B batch, S source length, T target length, D d_model, H heads, Dh = D/H, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig


def sinusoidal_positions(n: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)  (Vaswani et al. §3.5)."""
    position = torch.arange(n, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


def fairseq_positions(n: int, d: int) -> Tensor:
    """fairseq's table: row p = [sin(p·f_i) | cos(p·f_i)], f_i = 10000^(-i/(D/2-1)), i < D/2 (zero column if D odd)."""
    half = d // 2
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    angles = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq[None]
    return F.pad(torch.cat([torch.sin(angles), torch.cos(angles)], dim=1), (0, d % 2))


class Embedding(nn.Module):
    """Token embedding × sqrt(D) + sinusoidal position (unless config.position_embeddings is off), then dropout."""

    def __init__(self, tokens: nn.Embedding, config: ModelConfig):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        if config.sinusoid == "fairseq":  # its first token sits at position pad+1 (make_positions)
            self.first = config.pad + 1
            positions = fairseq_positions(config.max_positions + self.first, config.d_model)
        else:
            self.first = 0
            positions = sinusoidal_positions(config.max_positions, config.d_model)
        if not config.position_embeddings:
            positions.zero_()
        self.positions: Tensor
        self.register_buffer("positions", positions, persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:  # (B, T) → (B, T, D)
        start = self.first + offset
        x = self.tokens(ids) * self.scale + self.positions[start : start + ids.size(1)]
        return self.dropout(x.to(self.tokens.weight.dtype))  # bf16 weights: the fp32 sum, rounded once


def new_token_embedding(vocab: int, config: ModelConfig) -> nn.Embedding:
    embedding = nn.Embedding(vocab, config.d_model, padding_idx=config.pad)
    nn.init.normal_(embedding.weight, mean=0.0, std=config.d_model**-0.5)  # fairseq's init
    nn.init.zeros_(embedding.weight[config.pad])
    return embedding


@dataclass
class KV:
    """Keys and values of one attention, (B, H, S, Dh) each; grown step by step for decoder self-attention."""

    k: Tensor
    v: Tensor

    def reorder(self, order: Tensor) -> KV:
        return KV(self.k.index_select(0, order), self.v.index_select(0, order))


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float, step: bool | None = None
) -> Tensor:
    """softmax(QK^T/sqrt(Dh) + mask) V: (B, H, T, Dh) × (B, H, S, Dh) → (B, H, T, Dh).

    scaled_dot_product_attention everywhere except on a CPU in bf16 (autocast, or a model with bf16 weights), where
    PyTorch's CPU flash kernel is several times slower than these three ops for NMT-length sequences, and on a CPU
    in a decoding step (`step`; default: a single query), where the three ops are faster in fp32 too
    (docs/benchmarks.md has the readings).
    """
    step = q.size(-2) == 1 if step is None else step
    if not (q.device.type == "cpu" and (torch.is_autocast_enabled("cpu") or q.dtype == torch.bfloat16 or step)):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, dropout_p=dropout
        )
    return F.dropout(attention_weights(q, k, mask, causal), dropout, training=dropout > 0) @ v


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """softmax(QK^T/sqrt(Dh) + mask): (B, H, T, S)."""
    scores = (q @ k.transpose(-1, -2)) * q.size(-1) ** -0.5  # (B, H, T, S)
    if causal and mask is None:
        T, S = scores.shape[-2:]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


def by_sentence(q: Tensor, sentences: int) -> Tensor:
    """Beam search keeps one copy of a sentence's source keys/values for its g hypotheses: their queries
    (n·g, H, T, Dh) are stacked as one sentence's (n, H, g·T, Dh), so that a hypothesis reads its sentence's source
    without a copy of it per beam (and the matmul has g rows instead of one). g = 1 (training): q unchanged."""
    rows, H, T, Dh = q.shape
    if rows == sentences:
        return q
    return q.view(sentences, rows // sentences, H, T, Dh).transpose(1, 2).reshape(sentences, H, -1, Dh)


def by_row(y: Tensor, rows: int) -> Tensor:
    """by_sentence's inverse: (n, H, g·T, Dh) → (n·g, H, T, Dh)."""
    n, H, gT, Dh = y.shape
    if n == rows:
        return y
    g = rows // n
    return y.view(n, H, g, gT // g, Dh).transpose(1, 2).reshape(rows, H, gT // g, Dh)


def merge_heads(y: Tensor, rows: int) -> Tensor:
    """Attention outputs (B, H, T, Dh), or by sentence (n, H, g·T, Dh) → (B = n·g rows, T, H·Dh), in one copy."""
    n, H, gT, Dh = y.shape
    g = rows // n
    return y.view(n, H, g, gT // g, Dh).permute(0, 2, 3, 1, 4).reshape(rows, gT // g, H * Dh)


def attention_after_prefix(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, prefix: KV, prefix_mask: Tensor, dropout: float
) -> Tensor:
    """One softmax over [prefix keys; own keys] where the prefix has one row per sentence and q, k, v one per
    hypothesis (LWC's mixed attention in beam search): the prefix's scores and values are taken by sentence
    (by_sentence) rather than concatenated to every hypothesis's keys at every step.
    q (N, H, T, Dh), k/v (N, H, P, Dh), mask (·, ·, T, P); prefix (n, H, S, Dh), prefix_mask (n, 1, 1, S)."""
    N, H, T, _ = q.shape
    n, S = prefix.k.size(0), prefix.k.size(2)
    scale = q.size(-1) ** -0.5
    from_prefix = (by_sentence(q, n) @ prefix.k.transpose(-1, -2) * scale).masked_fill(~prefix_mask, float("-inf"))
    own = (q @ k.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))  # (N, H, T, P)
    weights = torch.cat([by_row(from_prefix, N), own], dim=-1).softmax(dim=-1)
    weights = F.dropout(weights, dropout, training=dropout > 0)
    return by_row(by_sentence(weights[..., :S], n) @ prefix.v, N) + weights[..., S:] @ v


class MultiheadAttention(nn.Module):
    record_weights = False  # set on an instance to keep its latest attention map (figures: LWC F2-4 style)

    def __init__(self, config: ModelConfig, self_attention: bool):
        super().__init__()
        d = config.d_model
        self.heads, self.dropout = config.heads, config.attention_dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv = nn.Linear(d, 3 * d)  # one matmul for Q, K, V
        else:
            self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)
        for linear in (m for m in self.modules() if isinstance(m, nn.Linear)):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def split(self, x: Tensor) -> Tensor:  # (B, T, D) → (B, H, T, Dh)
        B, T, D = x.shape
        return x.view(B, T, self.heads, D // self.heads).transpose(1, 2)

    def projections(self) -> list[nn.Linear]:
        """The input projections: [Q|K|V] for self-attention, [Q], [K|V] for cross-attention."""
        return [self.qkv] if self.self_attention else [self.q, self.kv]

    def project_q(self, x: Tensor) -> Tensor:  # (B, T, D) → (B, H, T, Dh)
        if not self.self_attention:
            return self.split(self.q(x))
        d = x.size(-1)  # a self-attention module's query slice, for the same projections used on a memory
        return self.split(F.linear(x, self.qkv.weight[:d], self.qkv.bias[:d]))

    def project_kv(self, memory: Tensor) -> KV:
        if not self.self_attention:
            k, v = self.kv(memory).chunk(2, dim=-1)
        else:
            d = memory.size(-1)
            k, v = F.linear(memory, self.qkv.weight[d:], self.qkv.bias[d:]).chunk(2, dim=-1)
        return KV(self.split(k), self.split(v))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | KV | None = None,
        mask: Tensor | None = None,
        causal: bool = False,
        cache: KV | None = None,
        prefix: KV | None = None,
        prefix_mask: Tensor | None = None,
    ) -> tuple[Tensor, KV | None]:
        """Self-attention when memory is None (cache: the previous steps' K/V, returned grown; prefix: fixed K/V
        placed before them, e.g. LWC's source half, with its own prefix_mask), else cross-attention to memory (a
        tensor, or its precomputed KV, which in beam search has one row per sentence: see by_sentence).
        mask: bool, True = may attend, broadcast to (B, H, T, S)."""
        rows, dropout = x.size(0), self.dropout if self.training else 0.0
        if memory is None:
            q, k, v = (self.split(t) for t in self.qkv(x).chunk(3, dim=-1))
            if cache is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
                causal = False  # one new query sees every cached key
            cache = KV(k, v)
            if prefix is not None:  # LWC's mixed attention: the causal mask and the source's come with the prefix
                assert mask is not None and prefix_mask is not None
                if prefix.k.size(0) != rows:
                    return self.out(
                        merge_heads(attention_after_prefix(q, k, v, mask, prefix, prefix_mask, dropout), rows)
                    ), cache
                T = q.size(2)
                k, v = torch.cat([prefix.k, k], dim=2), torch.cat([prefix.v, v], dim=2)
                mask = torch.cat([prefix_mask.expand(rows, 1, T, -1), mask.expand(rows, 1, T, -1)], dim=-1)
        else:
            kv = memory if isinstance(memory, KV) else self.project_kv(memory)
            q, k, v = by_sentence(self.project_q(x), kv.k.size(0)), kv.k, kv.v
        if self.record_weights:  # mean over heads of the latest call: (B, T, S), and whether it read its own past
            self.last_weights = attention_weights(q, k, mask, causal).mean(dim=1).detach()
            self.last_causal = causal
        y = attention(q, k, v, mask, causal, dropout, step=x.size(1) == 1)  # (B, H, T, Dh), or by sentence
        return self.out(merge_heads(y, rows)), cache

    def fairseq_init(self) -> None:
        """fairseq's MultiheadAttention.reset_parameters: each of Q, K, V Xavier-uniform with gain 1/sqrt(2), its
        bias nn.Linear's U(±1/sqrt(fan_in)); the output projection keeps Xavier with a zero bias."""
        for linear in self.projections():
            d = linear.in_features
            for block in linear.weight.split(d):  # (D, D) each: fairseq's q_proj, k_proj, v_proj
                nn.init.xavier_uniform_(block, gain=2**-0.5)
            nn.init.uniform_(linear.bias, -(d**-0.5), d**-0.5)


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(config.d_model, config.d_ff), nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.activation_dropout)
        for linear in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))

    def fan_in_init(self) -> None:
        """fc1 and fc2 as plain nn.Linear layers: weights and biases U(±1/sqrt(fan_in))."""
        for linear in (self.fc1, self.fc2):
            bound = linear.in_features**-0.5
            nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.uniform_(linear.bias, -bound, bound)


class Layer(nn.Module):
    """What an encoder or decoder stack asks of its layers, whatever their backbone."""

    # the layer also reads the states below its input: k > 1 means [H^{i−1}, …, H^{i−k}] (transformer.layer_input)
    looks_back = 1

    def empty_cache(self, like: Tensor):
        """A decoder layer's incremental-decoding state before the first step; like: any (B, ·, D) tensor of the
        batch. None: self-attention's keys and values, which start empty and grow with every step."""
        return None


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


def fairseq_init(model: nn.Module, plain_ffn: bool) -> None:
    """fairseq 0.12's Transformer initialisation, which `xavier` simplifies: every attention as fairseq's
    (`MultiheadAttention.fairseq_init`); with plain_ffn (the Transformer backbone), the FFNs' fc1/fc2 as the plain
    nn.Linear layers they are there. The convolutional backbones keep Xavier FFNs with zero biases, which is what
    fairseq's lightconv.py Linear gives them."""
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            module.fairseq_init()
        elif isinstance(module, FeedForward) and plain_ffn:
            module.fan_in_init()
