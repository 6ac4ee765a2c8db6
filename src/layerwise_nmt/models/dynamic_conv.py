"""Lightweight and dynamic convolutions (Wu et al. 2019) as a backbone: GCA's second baseline (Liu et al. T2, T3).

A convolution block replaces self-attention; everything else is the Transformer's (post-norm):

    h = GLU(W_1 Drop_in(x))                          input projection d → 2d, gated back to d (or W_1 x, d → d)
    DynamicConv: w_t = softmax_k(W_w h_t) ∈ R^{H×K}  kernel predicted from the current position, per head
    LightConv:   w   = softmax_k(W)       ∈ R^{H×K}  one kernel per head, shared by positions
    c_t[r] = Σ_k w_{t,head(r),k} · h_{t−p+k}[r]      depthwise over the d channels (d/H channels share a head's kernel)
    x = LN(x + Drop(W_2 c + b))                      then, in the decoder, encoder-decoder attention, then the FFN

Encoder convolutions are centred (p = K//2); decoder ones are causal (p = K−1), so incremental decoding keeps the
last K−1 gated inputs of each layer (`ConvCache`). Weight dropout applies to the normalised kernels; input dropout
(Drop_in, fairseq's input_dropout) to the block's input before W_1, not to the residual.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .layers import FeedForward, Layer, MultiheadAttention


@dataclass
class ConvCache:
    """The last K−1 gated inputs of one decoder convolution, (B, K−1, D)."""

    window: Tensor

    def reorder(self, order: Tensor) -> ConvCache:
        return ConvCache(self.window.index_select(0, order))


class Convolution(nn.Module):
    def __init__(self, config: ModelConfig, kernel: int, causal: bool, dynamic: bool):
        super().__init__()
        d, self.heads, self.kernel = config.d_model, config.heads, kernel
        self.left = kernel - 1 if causal else kernel // 2
        self.glu = config.conv_glu
        self.inp = nn.Linear(d, 2 * d if self.glu else d)
        self.predict = nn.Linear(d, self.heads * kernel, bias=False) if dynamic else None  # DynamicConv: w_t
        self.weight = None if dynamic else nn.Parameter(torch.empty(self.heads, kernel))  # LightConv: W
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        self.bias = nn.Parameter(torch.zeros(d))
        self.out = nn.Linear(d, d)
        self.weight_dropout, self.input_dropout = config.weight_dropout, config.input_dropout
        for linear in (self.inp, self.out):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def kernels(self, h: Tensor) -> Tensor:  # (B, T, D) → (B, T, H, K) normalised, or (1, 1, H, K)
        w = self.predict(h).unflatten(-1, (self.heads, self.kernel)) if self.predict is not None else self.weight
        assert w is not None  # DynamicConv predicts its kernels, LightConv learns them: one of the two is set
        w = F.dropout(w.float().softmax(dim=-1), self.weight_dropout, self.training).to(h.dtype)
        return w if w.dim() == 4 else w[None, None]

    def forward(
        self, x: Tensor, pad: Tensor | None = None, cache: ConvCache | None = None
    ) -> tuple[Tensor, ConvCache | None]:
        """x (B, T, D); pad (B, T) True at padding (zeroed before convolving); cache: causal decoding only."""
        h = self.inp(F.dropout(x, self.input_dropout, self.training))
        h = F.glu(h, dim=-1) if self.glu else h
        if pad is not None:
            h = h.masked_fill(pad[..., None], 0.0)
        B, T, D = h.shape
        if cache is not None:  # the window: K−1 previous inputs, then this step's
            padded = torch.cat([cache.window, h], dim=1)
            cache = ConvCache(padded[:, -(self.kernel - 1) :] if self.kernel > 1 else padded[:, :0])
        else:
            padded = F.pad(h, (0, 0, self.left, self.kernel - 1 - self.left))
        windows = padded.unfold(1, self.kernel, 1)[:, -T:]  # (B, T, D, K): position t sees h_{t−left … t−left+K−1}
        windows = windows.unflatten(2, (self.heads, D // self.heads))  # (B, T, H, D/H, K)
        c = torch.einsum("bthrk,bthk->bthr", windows, self.kernels(h)).flatten(2) + self.bias
        return self.out(c), cache

    def empty_cache(self, like: Tensor) -> ConvCache:  # like: any (B, ·, D) tensor of the batch
        return ConvCache(like.new_zeros(like.size(0), self.kernel - 1, like.size(-1)))


class ConvEncoderLayer(Layer):
    dynamic = True

    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__()
        self.conv = Convolution(config, config.kernel_sizes[index], causal=False, dynamic=self.dynamic)
        self.ffn = FeedForward(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, D), mask (B, 1, 1, S) True at real tokens."""
        x = self.norm1(x + self.dropout(self.conv(x, pad=~mask[:, 0, 0])[0]))
        return self.norm2(x + self.dropout(self.ffn(x)))


class ConvDecoderLayer(Layer):
    dynamic = True

    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__()
        self.conv = Convolution(config, config.kernel_sizes[index], causal=True, dynamic=self.dynamic)
        self.cross_attn = MultiheadAttention(config, self_attention=False)
        self.ffn = FeedForward(config)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(config.d_model) for _ in range(3))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, view, view_mask: Tensor, cache=None) -> tuple[Tensor, ConvCache | None]:
        """Same contract as DecoderLayer: `cache` is None for a whole sequence, else this layer's ConvCache
        (`empty_cache` before the first step), returned advanced by x's positions."""
        h, cache = self.conv(x, cache=cache)
        x = self.norm1(x + self.dropout(h))
        x = self.norm2(x + self.dropout(self.cross_attn(x, view, mask=view_mask)[0]))
        return self.norm3(x + self.dropout(self.ffn(x))), cache

    def empty_cache(self, like: Tensor) -> ConvCache:
        return self.conv.empty_cache(like)


class LightEncoderLayer(ConvEncoderLayer):
    dynamic = False


class LightDecoderLayer(ConvDecoderLayer):
    dynamic = False
