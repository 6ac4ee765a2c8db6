"""Context gates (Tu et al. 2017, TACL) in a 6+6 Transformer: LWC §5.4's comparison system.

Tu et al.'s "both" gate for an RNN decoder weighs the source context s_i against the target context
(previous word e(y_{i−1}) and decoder state t_{i−1}):

    z_i = σ(W_z e(y_{i−1}) + U_z t_{i−1} + C_z s_i)
    t_i = f((1 − z_i) ∘ (W e(y_{i−1}) + U t_{i−1}) + z_i ∘ C s_i)

Our Transformer reading (LWC's supplementary part B, which describes theirs, is not available): in every decoder
layer the target context is x, the state after causal self-attention (it carries the previous words and states),
and the source context is c, the cross-attention output. The residual x + c becomes

    z = σ(w_x ∘ x + w_c ∘ c + b),    x ← LN((1 − z) ∘ x + z ∘ c)

(pre-norm stacks: x ← (1 − z) ∘ x + z ∘ c, the LN being at the cross-attention's input), with diagonal
(element-wise) gate weights: 3·d parameters per layer, 4,608 for 6 layers at d=256, which is what the paper's
19.08M (vs 19.07M for the plain 6+6 model) allows; full matrices W_z, C_z would add 0.79M (19.86M). The gate
starts at zero weights (z = 0.5), where post-norm LN((x + c)/2) = LN(x + c): training starts from the baseline.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .config import ModelConfig
from .transformer import DecoderLayer, Seq2Seq


class GatedDecoderLayer(DecoderLayer):
    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__(config, index)
        self.gate = nn.Parameter(torch.zeros(3, config.d_model))  # w_x, w_c, b

    def add_source(self, x: Tensor, context: Tensor) -> Tensor:
        context = self.dropout(context)
        z = torch.sigmoid(self.gate[0] * x + self.gate[1] * context + self.gate[2])  # (B, T, D)
        mixed = (1 - z) * x + z * context
        return mixed if self.pre_norm else self.norm2(mixed)  # pre-norm: the gate replaces x + c, LN is before


class ContextGateTransformer(Seq2Seq):
    decoder_layer = GatedDecoderLayer
