"""A learned combination of all encoder layers as each decoder layer's source view: the scalar mix of ELMo
(Peters et al. 2018, Eq. 1) in place of the top layer every decoder layer of the baseline attends to.

    view_i = γ_i · Σ_j softmax(w_i)_j · S_j,    j = 0 … N (S_0: the embedding output), i = 1 … M

It plugs into the shared Transformer where the papers' methods do: `Seq2Seq.source_views` gets every encoder layer's
states and returns one view per decoder layer (cross-view decoding, Liu et al. 2020, overrides the same method).
Beam search needs nothing more: `Seq2Seq.start` computes the views once per sentence.

Named in the config (examples/layer_mix/overlay.yaml), never in the package:

    models:
      layer_mix: {class: "layer_mix:LayerMixTransformer", user_dir: examples/layer_mix}
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from layerwise_nmt import UserError
from layerwise_nmt.models.config import ModelConfig
from layerwise_nmt.models.transformer import EncoderOutput, Seq2Seq


@dataclass
class LayerMixConfig(ModelConfig):
    """The shared Transformer's settings (the config's arch keys), and the mix's own."""

    # one mix per decoder layer (Peters et al. learn one per task; a decoder layer is a consumer of its own)
    per_layer: bool = True
    # mix the embedding output S_0 too, as ELMo mixes its token layer
    embeddings: bool = True

    def check(self) -> None:
        super().check()
        if self.norm != "post":  # a pre-norm stack normalises its top state only: the others' scales grow by depth
            raise UserError(f"model layer_mix mixes layer-normalised states: needs norm=post, got {self.norm}")


class LayerMixTransformer(Seq2Seq):
    config_class = LayerMixConfig

    def __init__(self, config: LayerMixConfig):
        super().__init__(config)
        mixes = config.decoder_layers if config.per_layer else 1
        layers = config.encoder_layers + (1 if config.embeddings else 0)
        self.weights = nn.Parameter(torch.zeros(mixes, layers))  # w_i: uniform at first
        self.gamma = nn.Parameter(torch.ones(mixes))  # γ_i

    def source_views(self, encoded: EncoderOutput) -> list[Tensor]:
        first = 0 if self.config.embeddings else 1
        states = torch.stack(encoded.states[first : self.config.encoder_layers + 1], dim=0)  # (J, B, S, D)
        shares = self.weights.softmax(dim=-1)  # (M, J)
        views = torch.einsum("mj,jbsd->mbsd", shares, states) * self.gamma[:, None, None, None]
        views = list(views.unbind(dim=0))
        return views if len(views) == self.config.decoder_layers else views * self.config.decoder_layers
