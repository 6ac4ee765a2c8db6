"""The shared Transformer (Vaswani et al. 2017) every paper's variant builds on: post-norm as in the paper and
fairseq, or pre-norm as in tensor2tensor (`norm: pre`, which adds one final LayerNorm per stack).

Shapes: B batch, S source length, T target length, D d_model, H heads, V vocabulary, L layers. Batch-major throughout.

The seam (design.md): `Encoder.forward` returns every layer's states (the embedding output is layer 0) and the
padding mask; each decoder layer i attends to the source view it is handed, `views[i]`. The baseline hands every
decoder layer the top encoder layer (`Seq2Seq.source_views`); cross-view decoding, layer fusion and aggregation
override that one method, or the encoder/decoder stacks, in their own modules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import UserError
from ..settings import Settings, setting
from .registry import register

# backbone name → (encoder layer class, decoder layer class); models/dynamic_conv.py adds the convolutional ones.
BACKBONES: dict[str, tuple[type, type]] = {}

# name → (d_model, d_ff, heads); layer counts and everything else are separate keys.
PRESETS = {
    "small": (256, 1024, 4),  # t2t transformer_small (LWC T1/T3/T4), MLRF's De-En model
    "iwslt": (512, 1024, 4),  # fairseq transformer_iwslt_de_en
    "base": (512, 2048, 8),
    "big": (1024, 4096, 16),
}
# fairseq's arch names → the preset with its sizes (`lwnmt train --arch transformer_iwslt_de_en`); all are 6+6
FAIRSEQ_ARCHS = {"transformer": "base", "transformer_wmt_en_de": "base", "transformer_iwslt_de_en": "iwslt",
                 "transformer_wmt_en_de_big": "big", "transformer_vaswani_wmt_en_de_big": "big",
                 "transformer_vaswani_wmt_en_fr_big": "big"}


@dataclass
class ModelConfig(Settings):
    """Everything needed to rebuild a model; saved in every checkpoint."""

    kind = "model setting"

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
    # Xavier with gain 1/sqrt(2) and U(±1/sqrt(D)) biases, FFN at nn.Linear's default; models/registry.py);
    # fan_in: every Linear U(±1/sqrt(fan_in)) for weights and biases (MLRF §4.2). Token embeddings: N(0, d^-0.5).
    init: str = "xavier"
    # transformer, or a convolutional backbone registered in BACKBONES (dynamic_conv, lightweight_conv: Wu et al.
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
            for key, value in zip(("d_model", "d_ff", "heads"), PRESETS[preset]):
                values.setdefault(key, value)
        return values

    def check(self) -> None:
        if self.backbone != "transformer" and self.backbone not in BACKBONES:
            raise UserError(f"backbone={self.backbone!r}; expected transformer or one of {', '.join(BACKBONES)}")
        if self.backbone != "transformer" and max(self.encoder_layers, self.decoder_layers) > len(self.kernel_sizes):
            raise UserError(f"kernel_sizes has {len(self.kernel_sizes)} entries for up to "
                            f"{max(self.encoder_layers, self.decoder_layers)} layers")
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
            raise UserError(f"tie=all needs a joint vocabulary, got {self.src_vocab} source vs {self.tgt_vocab} "
                            f"target symbols (use the task's bin-joint data)")
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
        self.register_buffer("positions", positions, persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:  # (B, T) → (B, T, D)
        start = self.first + offset
        x = self.tokens(ids) * self.scale + self.positions[start:start + ids.size(1)]
        return self.dropout(x)


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

    def reorder(self, order: Tensor) -> "KV":
        return KV(self.k.index_select(0, order), self.v.index_select(0, order))


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float,
              step: bool | None = None) -> Tensor:
    """softmax(QK^T/sqrt(Dh) + mask) V: (B, H, T, Dh) × (B, H, S, Dh) → (B, H, T, Dh).

    scaled_dot_product_attention everywhere except on a CPU under bf16 autocast, where PyTorch 2.13's CPU flash
    kernel is 5-8× slower than these three ops for NMT-length sequences (T ≤ ~50; measured on this project's CI CPU),
    and on a CPU in a decoding step (`step`; default: a single query), where the three ops are 1.5-3× faster in fp32
    too (640 rows of 1 query, or 128 sentences of 5 hypotheses' queries: by_sentence; 4 heads of 64, S = 10-20; Zen 4
    EPYC, 2 threads).
    """
    step = q.size(-2) == 1 if step is None else step
    if not (q.device.type == "cpu" and (torch.is_autocast_enabled("cpu") or step)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              dropout_p=dropout)
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


def attention_after_prefix(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, prefix: KV, prefix_mask: Tensor,
                           dropout: float) -> Tensor:
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

    def project_q(self, x: Tensor) -> Tensor:  # (B, T, D) → (B, H, T, Dh)
        if hasattr(self, "q"):
            return self.split(self.q(x))
        d = x.size(-1)  # a self-attention module's query slice, for the same projections used on a memory
        return self.split(F.linear(x, self.qkv.weight[:d], self.qkv.bias[:d]))

    def project_kv(self, memory: Tensor) -> KV:
        if hasattr(self, "kv"):
            k, v = self.kv(memory).chunk(2, dim=-1)
        else:
            d = memory.size(-1)
            k, v = F.linear(memory, self.qkv.weight[d:], self.qkv.bias[d:]).chunk(2, dim=-1)
        return KV(self.split(k), self.split(v))

    def forward(self, x: Tensor, memory: Tensor | KV | None = None, mask: Tensor | None = None,
                causal: bool = False, cache: KV | None = None, prefix: KV | None = None,
                prefix_mask: Tensor | None = None) -> tuple[Tensor, KV | None]:
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
            if prefix is not None and prefix.k.size(0) != rows:
                return self.out(merge_heads(attention_after_prefix(q, k, v, mask, prefix, prefix_mask, dropout),
                                            rows)), cache
            if prefix is not None:
                T = q.size(2)
                k, v = torch.cat([prefix.k, k], dim=2), torch.cat([prefix.v, v], dim=2)
                mask = torch.cat([prefix_mask.expand(rows, 1, T, -1), mask.expand(rows, 1, T, -1)], dim=-1)
        else:
            kv = memory if isinstance(memory, KV) else self.project_kv(memory)
            q, k, v = by_sentence(self.project_q(x), kv.k.size(0)), kv.k, kv.v
        if self.record_weights:  # mean over heads of the latest call: (B, T, S)
            self.last_weights = attention_weights(q, k, mask, causal).mean(dim=1).detach()
        y = attention(q, k, v, mask, causal, dropout, step=x.size(1) == 1)  # (B, H, T, Dh), or by sentence
        return self.out(merge_heads(y, rows)), cache


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


class Sublayers(nn.Module):
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

    def attend(self, x: Tensor, mask: Tensor, prefix: KV | None = None, cache: KV | None = None,
               prefix_mask: Tensor | None = None) -> tuple[Tensor, KV]:
        """The layer, also returning x's keys/values (cache grown); prefix: fixed keys/values placed first, masked
        by prefix_mask. LWC runs its shared [source; target] layers through this."""
        h, kv = self.attn(self.sublayer_input(x, self.norm1), mask=mask, cache=cache, prefix=prefix,
                          prefix_mask=prefix_mask)
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

    def forward(self, x: Tensor, view: Tensor | KV, view_mask: Tensor,
                cache: KV | None = None) -> tuple[Tensor, KV | None]:
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


def plain_stack(x: Tensor, layer, n: int) -> tuple[list[Tensor], Tensor]:
    """H^0 = x, H^l = LAYER_l(H^{l−1}), l = 1 … n → (H^0 … H^n, the stack's output H^n). `layer(i, h, below)`
    applies layer i to h; below = H^0 … H^i, the states so far. A variant that aggregates the layers (Dou et al.)
    replaces this function on its Encoder/Decoder (`stack`) and calls `layer` the same way."""
    states = [x]
    for i in range(n):
        states.append(layer(i, states[-1], states))
    return states, states[-1]


def layer_input(layer: nn.Module, h: Tensor, below: list[Tensor]) -> Tensor | list[Tensor]:
    """What a layer reads: h; a layer that also attends to the states below its input (`looks_back` = k: Dou et
    al.'s multi-layer attention) reads [h, H^{i−1}, …, H^{i−k+1}] (below = H^0 … H^i)."""
    k = getattr(layer, "looks_back", 1)
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
    def __init__(self, config: ModelConfig, tokens: nn.Embedding, layer: type = None):
        super().__init__()
        self.embed = Embedding(tokens, config)
        self.layers = nn.ModuleList((layer or EncoderLayer)(config, i) for i in range(config.encoder_layers))
        self.final_norm = final_norm(config)
        self.pad = config.pad
        self.stack = plain_stack

    def forward(self, src: Tensor) -> EncoderOutput:  # src (B, S)
        mask = (src != self.pad)[:, None, None, :]

        def layer(i: int, h: Tensor, below: list[Tensor]) -> Tensor:
            return self.layers[i](layer_input(self.layers[i], h, below), mask)

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
        self.views, self.view_mask, self.self_kv = reorder_beams(rows, sentences, self.views, self.view_mask,
                                                                 self.self_kv)


def reorder_beams(rows: Tensor, sentences: Tensor | None, source: list[KV], source_mask: Tensor,
                  growing: list[KV | None]) -> tuple[list[KV], Tensor, list[KV | None]]:
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
        self.stack = plain_stack

    def forward(self, prev: Tensor, views: list[Tensor], view_mask: Tensor) -> list[Tensor]:
        """prev (B, T) → every layer's states, L+1 tensors (B, T, D) (L+2 where an aggregation appends its
        output); layer i reads views[i]."""
        return self.run(self.embed(prev), views, view_mask, caches=None)

    def run(self, x: Tensor, views: list, view_mask: Tensor, caches: list | None) -> list[Tensor]:
        """The stack on embedded input x; caches (incremental decoding) are updated in place."""
        def layer(i: int, h: Tensor, below: list[Tensor]) -> Tensor:
            out, cache = self.layers[i](layer_input(self.layers[i], h, below), views[i], view_mask,
                                        cache=caches[i] if caches is not None else None)
            if caches is not None:
                caches[i] = cache
            return out

        return self.normalise_top(with_output(*self.stack(x, layer, len(self.layers))))

    def normalise_top(self, states: list[Tensor]) -> list[Tensor]:
        if self.final_norm is not None:
            states[-1] = self.final_norm(states[-1])
        return states

    def start(self, views: list[Tensor], view_mask: Tensor) -> DecoderState:
        kvs = [layer.cross_attn.project_kv(view) for layer, view in zip(self.layers, views)]
        growing = [layer.empty_cache(view) if hasattr(layer, "empty_cache") else None  # conv layers' windows
                   for layer, view in zip(self.layers, views)]
        return DecoderState(kvs, view_mask, growing)

    def step(self, last: Tensor, state: DecoderState) -> list[Tensor]:
        """last (B, 1): the newest token → its states in every layer, L+1 tensors (B, 1, D); state grows by one."""
        states = self.run(self.embed(last, offset=state.step), state.views, state.view_mask, state.self_kv)
        state.step += 1
        return states


@register("transformer")
class Seq2Seq(nn.Module):
    """Encoder-decoder Transformer. Variants subclass it and override `source_views` (or the stacks)."""

    config_class = ModelConfig
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

    def forward(self, src: Tensor, prev: Tensor) -> Tensor:
        """src (B, S), prev (B, T) = </s> + target[:-1] → logits (B, T, V)."""
        encoded = self.encoder(src)
        return self.predict(self.decoder(prev, self.source_views(encoded), encoded.mask))

    # -- incremental decoding: the interface beam search uses ------------------------------------------------
    def start(self, src: Tensor) -> DecoderState:
        encoded = self.encoder(src)
        return self.decoder.start(self.source_views(encoded), encoded.mask)

    def step(self, last: Tensor, state: DecoderState) -> Tensor:
        """last (B,) → next-token logits (B, V)."""
        return self.predict(self.decoder.step(last[:, None], state))[:, 0]


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (tied matrices counted once), like fairseq's 'num. model params'."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
