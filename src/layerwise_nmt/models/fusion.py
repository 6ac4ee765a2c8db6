"""Multi-layer representation fusion (Wang et al. 2018, COLING): fuse every layer's state at each position.

Z_j = (z_j^0, z_j^1, …, z_j^L)  with z^0 the embedding layer (footnote 2), per position j:

    AVG:  φ(Z_j) = (1/L) Σ_l z_j^l                                              (§3.2; no parameters)
    FNN:  φ(Z_j) = W_b ReLU(W_a [z̃^0; …; z̃^L])                                 (§3.2)
    SA:   z̃^l = z^l + E^l                                                      (Eq. 4, E shared by both sides)
          e_p^l = w_{2,p}ᵀ tanh(W_1ᵀ z̃^l)                                        (Eq. 5)
          a_p^l = softmax_l(e_p^l)                                               (Eq. 6)
          s̃_p = Σ_l a_p^l z̃^l                                                   (Eq. 7)
          φ(Z_j) = W_b ReLU(W_a [s̃_1; …; s̃_{n_hop}])                             (§3.2, "another FNN")
    then LN(φ) ("layer normalization after the fusion layer"), except AVG (see below).

Placement: encoder fusion replaces the top encoder layer as every decoder layer's memory (`source_views`);
decoder fusion replaces z^L in the softmax, softmax(W_o LN(φ(Z_j)) + b_o) (Eq. 3, `predict`). Fusion is
per position, so the decoder stays causal and incremental decoding fuses each new position's L+1 states.

Readings fixed by the parameter counts printed in Wang et al., "Multi-layer Representation Fusion for Neural
Machine Translation" (COLING 2018), with its 8,389/6,428 vocabularies, d=256, d_f=512, d_a=1024: FNN and SA fuse
L+1 inputs including z^0 (Enc-FNN 11.63M; L inputs would give 11.50M); the fusion FNNs and W_1, W_2 have no biases
(with biases Both-FNN-SA is 12.56M, not 12.55M); AVG has neither LayerNorm nor layer embedding (Enc-AVG 10.97M = the
baseline) and follows its formula over layers 1..L (config: word_embedding: false). σ is not stated: ReLU in the
FNNs, tanh in Eq. 5 (Lin et al. 2017).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import FusionConfig
from .transformer import EncoderOutput, Seq2Seq


class LayerFusion(nn.Module):
    """φ over one side's stack: L+1 tensors (B, T, D) → (B, T, D)."""

    def __init__(self, kind: str, layers: int, config: FusionConfig):
        super().__init__()
        # AVG is printed as (1/L)·Σ_{l=1..L} whatever the flag: z^0 joins only the weighted fusions (FNN, SA; Table
        # 4 ablates it there), so Both-AVG-SA averages 1..L in the encoder and attends over 0..L in the decoder
        self.word_embedding = config.word_embedding and kind != "avg"
        d, self.kind = config.d_model, kind
        inputs = layers + 1 if self.word_embedding else layers
        if kind == "sa":
            w1 = (
                (inputs, d, config.d_a)
                if config.independent_w1
                else (config.n_hop, d, config.d_a)
                if config.w1_per_hop
                else (d, config.d_a)
            )
            self.per_hop = config.w1_per_hop
            self.w1 = nn.Parameter(torch.empty(w1).uniform_(-(d**-0.5), d**-0.5))
            self.w2 = nn.Linear(config.d_a, config.n_hop, bias=False)
            inputs = config.n_hop  # the FNN below reads the n_hop attended vectors
        if kind in ("fnn", "sa"):
            self.fnn = nn.Sequential(
                nn.Linear(inputs * d, config.d_f, bias=False), nn.ReLU(), nn.Linear(config.d_f, d, bias=False)
            )
            self.norm = nn.LayerNorm(d)
        self.last_weights: Tensor | None = None  # SA's a_p^l of the latest call (B, T, n_hop, L'), for figures

    def forward(self, states: list[Tensor], layer_embedding: Tensor | None) -> Tensor:
        z = torch.stack(states if self.word_embedding else states[1:], dim=2)  # (B, T, L', D)
        if self.kind == "avg":
            return z.mean(dim=2)
        if layer_embedding is not None:  # Eq. 4; rows 0..L, or 1..L without z^0
            z = z + layer_embedding[-z.size(2) :]
        if self.kind == "sa":
            if self.per_hop:  # hop h scores with its own W_1^h and row h of W_2: (B, T, n_hop, L')
                hidden = torch.tanh(torch.einsum("btld,hda->bthla", z, self.w1))
                a = F.softmax(torch.einsum("bthla,ha->bthl", hidden, self.w2.weight), dim=3)
            else:
                if self.w1.dim() == 3:  # independent W_1 per layer
                    hidden = torch.einsum("btld,lda->btla", z, self.w1)
                else:
                    hidden = z @ self.w1
                a = F.softmax(self.w2(torch.tanh(hidden)), dim=2).transpose(2, 3)  # Eqs. 5-6: (B, T, n_hop, L')
            self.last_weights = a.detach()
            z = a @ z  # Eq. 7: (B, T, n_hop, D)
        return self.norm(self.fnn(z.flatten(2)))


class FusionTransformer(Seq2Seq):
    def __init__(self, config: FusionConfig):
        super().__init__(config)
        L = config.encoder_layers
        self.layer_embedding = None
        uses_embedding = {config.encoder_fusion, config.decoder_fusion} & {"fnn", "sa"}
        if config.layer_embedding and uses_embedding:
            self.layer_embedding = nn.Parameter(torch.empty(L + 1, config.d_model).uniform_(-0.1, 0.1))  # §4.2
        self.encoder_fusion = LayerFusion(config.encoder_fusion, L, config) if config.encoder_fusion != "none" else None
        self.decoder_fusion = (
            LayerFusion(config.decoder_fusion, config.decoder_layers, config)
            if config.decoder_fusion != "none"
            else None
        )

    def source_views(self, encoded: EncoderOutput) -> list[Tensor]:
        if self.encoder_fusion is None:
            return super().source_views(encoded)
        return [self.encoder_fusion(encoded.states, self.layer_embedding)] * self.config.decoder_layers

    def predict(self, states: list[Tensor]) -> Tensor:
        if self.decoder_fusion is None:
            return super().predict(states)
        return self.output(self.decoder_fusion(states, self.layer_embedding))  # Eq. 3
