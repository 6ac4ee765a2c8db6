"""Layer-wise cross-view decoding (Liu et al. 2020): decoder layer i attends to its own view g_i(S) of the encoder.

S_1 … S_N are the encoder layers' outputs (S_N the usual memory); decoder layer i = 1 … M computes
T_i = f_dec(T_{i−1}, g_i(S)) (Eq. 5), only its cross-attention memory changes:

    GCA  g_i(S) = S_{N−i+1}                 (the first decoder layer reads the top encoder layer, the last reads S_1)
    GPA  g_i(S) = S_i
    FGA  g_i(S) = S_1
    FMA  g_i(S) = Σ_j (W_ij S_j + b_ij)       (N·M d×d matrices and biases)
    AMA  g_i(S) = Σ_j α_ij S_j,  α_ij = softmax_j(v_ijᵀ S_j) per position (our reading of "an independent vector
         for each encoder layer": a learned v_ij ∈ R^d per decoder/encoder layer pair, scores per position)
    soft integration (Eq. 7): LN_i(g_i(S) + S_N), one LayerNorm per decoder layer.

Under GCA with soft integration, layer 1 reads LN_1(2·S_N) = S_N at initialisation because post-norm S_N is
already layer-normalised: a warm-started model starts exactly where its baseline was (tested).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .config import CrossViewConfig
from .transformer import EncoderOutput, Seq2Seq


class SourceViews(nn.Module):
    """g_1(S) … g_M(S) (and Eq. 7) from the encoder's layer outputs."""

    def __init__(self, config: CrossViewConfig):
        super().__init__()
        self.strategy = config.strategy
        N, M, d = config.encoder_layers, config.decoder_layers, config.d_model
        if self.strategy == "fma":
            self.weight = nn.Parameter(torch.empty(M, N, d, d))
            self.bias = nn.Parameter(torch.zeros(M, N, d))
            nn.init.xavier_uniform_(self.weight.view(M * N * d, d))
        if self.strategy == "ama":
            self.score = nn.Parameter(torch.empty(M, N, d).normal_(std=d**-0.5))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(M)) if config.soft_integration else None
        self.decoder_layers = M

    def forward(self, layers: list[Tensor]) -> list[Tensor]:
        """layers: S_1 … S_N, each (B, S, D) → M views, each (B, S, D)."""
        N, M = len(layers), self.decoder_layers
        if self.strategy == "top":
            views = [layers[-1]] * M
        elif self.strategy == "gca":
            views = [layers[N - i] for i in range(1, M + 1)]  # S_{N−i+1}, 1-based
        elif self.strategy == "gpa":
            views = layers[:M]
        elif self.strategy == "fga":
            views = [layers[0]] * M
        else:
            stacked = torch.stack(layers, dim=1)  # (B, N, S, D)
            if self.strategy == "fma":
                mixed = torch.einsum("bnsd,mned->bmse", stacked, self.weight) + self.bias.sum(dim=1)[None, :, None]
            else:  # ama: α_ij,t = softmax over j of v_ij · S_j,t
                alpha = torch.einsum("bnsd,mnd->bmns", stacked, self.score).softmax(dim=2)
                mixed = torch.einsum("bmns,bnsd->bmsd", alpha, stacked)
            views = list(mixed.unbind(dim=1))
        if self.norms is not None:  # Eq. 7
            views = [norm(view + layers[-1]) for norm, view in zip(self.norms, views, strict=True)]
        return views


class CrossViewTransformer(Seq2Seq):
    def __init__(self, config: CrossViewConfig):
        super().__init__(config)
        self.views = SourceViews(config)

    def source_views(self, encoded: EncoderOutput) -> list[Tensor]:
        return self.views(encoded.states[1:])
