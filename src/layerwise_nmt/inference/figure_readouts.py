"""What a figure shows of a trained model, read out of it once, into JSON: reports draw from files and never load
models (`lwnmt inspect`, the workflow's `inspect` rule; drawn by report/figures.py).

kinds:
    aggregation_shares  Eq. 11's share of each input in each encoder aggregation node (Dou et al. Figure 5)
    attention           one sentence's attention in a model teacher-forced on its own translation: a decoder
                        cross-attention (target × source), a decoder's self-attention (target × its inputs), an
                        encoder's (source × source), LWC's mixed attention (target × [source | target]) or an
                        MLRF fusion's layer attention (hop × layer, mean over target words)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from .. import UserError
from ..data.io import atomic_path, read_lines
from ..data.vocab import load_pair
from ..models.user import UserCode
from .decode import load_model


def aggregation_shares(model_path: str, user_code: UserCode | None = None) -> dict:
    """{"shares": [{node, input, share}]} for every encoder aggregation node of a `deep` model; a node's shares
    sum to 1."""
    model = load_model(model_path, user_code=user_code)
    nodes = model.aggregation_nodes()
    if nodes is None:
        raise UserError(
            f"{model_path}: a {type(model).__name__} has no aggregation nodes (model: deep with "
            f"aggregation: hierarchical has)"
        )
    shares = []
    for i, node in enumerate(nodes, start=1):
        names = ["H^{2i}", "H^{2i-1}", "Ĥ^{i-1}"][: node.n_inputs] if node.n_inputs > 1 else ["H^{2i-1}"]
        if i > 1 and node.n_inputs == 2:  # odd depth: the last node holds one layer and the previous node
            names = ["H^{2i-1}", "Ĥ^{i-1}"]
        shares += [
            {"node": f"Ĥ^{i}", "input": name, "share": float(share)}
            for name, share in zip(names, node.shares().detach(), strict=True)
        ]
    return {"shares": shares}


@torch.no_grad()
def attention(
    model_path: str,
    data: str,
    src: str,
    tgt: str,
    source: str,
    hypothesis: str,
    sentence: int,
    module: str,
    user_code: UserCode | None = None,
) -> dict:
    """{"grid": rows × columns weights, "ys", "xs": their labels, "x_label", "y_label", "split": the column where
    the target half of LWC's mixed attention starts (None elsewhere)}."""
    src_vocab, tgt_vocab = load_pair(data, src, tgt)
    source_lines, hypotheses = list(read_lines(source)), list(read_lines(hypothesis))
    if not 0 <= sentence < min(len(source_lines), len(hypotheses)):
        raise UserError(
            f"sentence {sentence}: {source} has {len(source_lines):,} lines and {hypothesis} "
            f"{len(hypotheses):,}; expected a line index from 0 in both"
        )
    source_line, target_line = source_lines[sentence], hypotheses[sentence]
    model = load_model(model_path, src_vocab, tgt_vocab, user_code=user_code)
    modules = dict(model.named_modules())
    if module not in modules:
        raise UserError(f"{model_path}: no module {module!r}; expected a name from model.named_modules()")
    modules[module].record_weights = True
    tgt_ids = tgt_vocab.encode(target_line)
    model(torch.tensor([src_vocab.encode(source_line)]), torch.tensor([[tgt_vocab.eos] + tgt_ids[:-1]]))
    weights = modules[module].last_weights[0]
    src_words, tgt_words = source_line.split() + ["</s>"], target_line.split() + ["</s>"]
    inputs = ["</s>"] + tgt_words[:-1]  # the decoder's inputs (shifted right): what a target-side key holds
    itself = getattr(modules[module], "self_attention", False) and weights.size(0) == weights.size(-1)
    if weights.dim() == 2 and itself:  # a self-attention over one side (LWC's mixed one is wider: source | target)
        causal = getattr(modules[module], "last_causal", False)
        words = (tgt_words, inputs) if causal else (src_words, src_words)
        return {
            "grid": weights.tolist(),
            "ys": words[0],
            "xs": words[1],
            "x_label": "target (decoder inputs)" if causal else "source",
            "y_label": "output word" if causal else "source word",
            "split": None,
        }
    if weights.dim() == 3:  # layer fusion (T, n_hop, L'): mean over target words
        grid = weights.mean(dim=0)
        first = grid.size(1) == len(model.decoder.layers)  # z^1.. without the embeddings' z^0
        return {
            "grid": grid.tolist(),
            "ys": [f"hop {h + 1}" for h in range(grid.size(0))],
            "xs": [f"z^{layer + (1 if first else 0)}" for layer in range(grid.size(1))],
            "x_label": "layer",
            "y_label": "hop (mean over target words)",
            "split": None,
        }
    grid = weights[-len(tgt_words) :]  # LWC: the target half's rows
    mixed = grid.size(1) > len(src_words)  # LWC: columns = [source (+ its extra tokens) | target]
    width = grid.size(1) - len(tgt_words) if mixed else grid.size(1)
    xs = (src_words + ["<s>"] * width)[:width] + (inputs if mixed else [])
    return {
        "grid": grid.tolist(),
        "ys": tgt_words,
        "xs": xs,
        "x_label": "source | target (decoder inputs)" if mixed else "source",
        "y_label": "output word",
        "split": width if mixed else None,
    }


KINDS: dict[str, Callable[..., dict]] = {"aggregation_shares": aggregation_shares, "attention": attention}


def check_options(kind: str, options: dict) -> None:
    """--options holds exactly what `kind` takes besides the model: a key missing or unknown is one line."""
    import inspect

    parameters = inspect.signature(KINDS[kind]).parameters
    taken = [name for name in parameters if name not in ("model_path", "user_code")]
    missing = [name for name in taken if parameters[name].default is inspect.Parameter.empty and name not in options]
    unknown = sorted(set(options) - set(taken))
    problems = [f"missing {', '.join(missing)}"] * bool(missing) + [f"unknown {', '.join(unknown)}"] * bool(unknown)
    if problems:
        raise UserError(
            f"--options for {kind}: {'; '.join(problems)}; expected the keys {', '.join(taken) or '(none)'}"
        )


def write(kind: str, model: str, options: dict, out: str, user_code: UserCode | None = None) -> None:
    """`kind`'s readout of `model` into JSON at `out`; a model from outside the package is imported only from the
    code `user_code` names, as translate does."""
    if kind not in KINDS:
        raise UserError(f"inspect: kind {kind!r}; expected one of {', '.join(KINDS)}")
    check_options(kind, options)
    result = {"kind": kind, "model": model, **options, **KINDS[kind](model, **options, user_code=user_code)}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(result, ensure_ascii=False))
