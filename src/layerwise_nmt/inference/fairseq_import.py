"""`lwnmt import-fairseq`: a fairseq 0.12 Transformer checkpoint → our model.pt, beside its dictionaries.

The imported model is our `transformer` with fairseq's settings read from the checkpoint's own arguments (so any
of the listed archs with its command-line overrides), and `sinusoid: fairseq` (fairseq's position table and offset).
The output directory is laid out like a fairseq data directory (model.pt, dict.<src>.txt, dict.<tgt>.txt), which
`lwnmt translate --data` reads, and which `warm_start: {path: …/model.pt}` checks the task's vocabulary against.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from .. import UserError
from ..training import checkpoint
from ..data.vocab import Dictionary
from ..models import build

ARCHS = (
    "transformer",
    "transformer_iwslt_de_en",
    "transformer_wmt_en_de",
    "transformer_wmt_en_de_big",
    "transformer_vaswani_wmt_en_de_big",
    "transformer_vaswani_wmt_en_fr_big",
    "transformer_wmt_en_fr_big",
    "transformer_wmt_en_de_big_t2t",
)
# fairseq settings our Transformer has no counterpart for: (argument, the value it must have)
UNSUPPORTED = (
    ("encoder_learned_pos", False),
    ("decoder_learned_pos", False),
    ("layernorm_embedding", False),
    ("adaptive_softmax_cutoff", None),
    ("cross_self_attention", False),
    ("no_decoder_final_norm", False),
    ("activation_fn", "relu"),
    ("adaptive_input", False),
    ("no_token_positional_embeddings", False),
    ("quant_noise_pq", 0),
)


def fairseq_args(state: dict, path: str) -> dict:
    """The model arguments a fairseq checkpoint was trained with (0.12 keeps them in cfg.model, older ones in
    args), as a plain dict."""
    cfg = state.get("cfg") or {}
    args = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    if args is None:
        args = state.get("args")
    if args is None:
        raise UserError(f"{path}: no model arguments (cfg.model or args); expected a fairseq 0.9-0.12 checkpoint")
    return dict(vars(args)) if hasattr(args, "__dict__") and not isinstance(args, dict) else dict(args)


def model_config(args: dict, src: Dictionary, tgt: Dictionary, path: str) -> dict:
    arch = args.get("arch") or args.get("_name")
    if arch not in ARCHS:
        raise UserError(f"{path}: arch {arch!r}; expected one of {', '.join(ARCHS)}")
    for key, wanted in UNSUPPORTED:
        value = args.get(key, wanted)
        if value != wanted and (wanted or value):  # False, None and 0 all mean "off"
            raise UserError(f"{path}: {key}={args[key]!r} has no counterpart in our Transformer (needs {wanted!r})")
    for encoder_key, decoder_key in (
        ("encoder_embed_dim", "decoder_embed_dim"),
        ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_normalize_before", "decoder_normalize_before"),
        ("decoder_embed_dim", "decoder_output_dim"),
    ):
        if args.get(encoder_key) != args.get(decoder_key, args.get(encoder_key)):
            raise UserError(
                f"{path}: {encoder_key}={args[encoder_key]} but {decoder_key}={args[decoder_key]}; our "
                f"Transformer has one value for both"
            )
    tie = (
        "all"
        if args.get("share_all_embeddings")
        else "decoder"
        if args.get("share_decoder_input_output_embed")
        else "none"
    )
    return {
        "src_vocab": len(src),
        "tgt_vocab": len(tgt),
        "pad": src.pad,
        "eos": src.eos,
        "d_model": args["encoder_embed_dim"],
        "d_ff": args["encoder_ffn_embed_dim"],
        "heads": args["encoder_attention_heads"],
        "encoder_layers": args["encoder_layers"],
        "decoder_layers": args["decoder_layers"],
        "dropout": args.get("dropout", 0.1),
        "attention_dropout": args.get("attention_dropout", 0.0),
        "activation_dropout": args.get("activation_dropout", args.get("relu_dropout", 0.0)) or 0.0,
        "tie": tie,
        "scale_embedding": not args.get("no_scale_embedding", False),
        "max_positions": max(args.get("max_source_positions", 1024), args.get("max_target_positions", 1024)),
        "norm": "pre" if args.get("encoder_normalize_before") else "post",
        "sinusoid": "fairseq",
        "init": "fairseq",
    }


def linear_names(config: dict) -> dict[str, tuple[str, ...]]:
    """Each of our linear and layer-norm modules → the fairseq modules whose weights and biases it holds, stacked
    along the output dimension in this order (our q/k/v are one matrix, fairseq's three)."""
    names: dict[str, tuple[str, ...]] = {}
    for i in range(config["encoder_layers"]):
        ours, theirs = f"encoder.layers.{i}", f"encoder.layers.{i}"
        names[f"{ours}.attn.qkv"] = tuple(f"{theirs}.self_attn.{p}_proj" for p in "qkv")
        for a, b in (
            ("attn.out", "self_attn.out_proj"),
            ("norm1", "self_attn_layer_norm"),
            ("norm2", "final_layer_norm"),
            ("ffn.fc1", "fc1"),
            ("ffn.fc2", "fc2"),
        ):
            names[f"{ours}.{a}"] = (f"{theirs}.{b}",)
    for i in range(config["decoder_layers"]):
        ours, theirs = f"decoder.layers.{i}", f"decoder.layers.{i}"
        names[f"{ours}.self_attn.qkv"] = tuple(f"{theirs}.self_attn.{p}_proj" for p in "qkv")
        names[f"{ours}.cross_attn.kv"] = tuple(f"{theirs}.encoder_attn.{p}_proj" for p in "kv")
        for a, b in (
            ("self_attn.out", "self_attn.out_proj"),
            ("cross_attn.q", "encoder_attn.q_proj"),
            ("cross_attn.out", "encoder_attn.out_proj"),
            ("norm1", "self_attn_layer_norm"),
            ("norm2", "encoder_attn_layer_norm"),
            ("norm3", "final_layer_norm"),
            ("ffn.fc1", "fc1"),
            ("ffn.fc2", "fc2"),
        ):
            names[f"{ours}.{a}"] = (f"{theirs}.{b}",)
    if config["norm"] == "pre":
        names["encoder.final_norm"] = ("encoder.layer_norm",)
        names["decoder.final_norm"] = ("decoder.layer_norm",)
    return names


def convert_weights(weights: dict, config: dict) -> dict[str, torch.Tensor]:
    """fairseq TransformerModel state dict → ours (tensors in fp32)."""
    weights = {k: v.float() if v.is_floating_point() else v for k, v in weights.items()}
    out = {
        f"{ours}.{part}": torch.cat([weights[f"{name}.{part}"] for name in theirs])
        for ours, theirs in linear_names(config).items()
        for part in ("weight", "bias")
    }
    out["encoder.embed.tokens.weight"] = weights["encoder.embed_tokens.weight"]
    out["decoder.embed.tokens.weight"] = weights["decoder.embed_tokens.weight"]
    out["output.weight"] = weights.get("decoder.output_projection.weight", weights["decoder.embed_tokens.weight"])
    return out


def is_fairseq_checkpoint(state: dict) -> bool:
    return isinstance(state.get("model"), dict) and "encoder.embed_tokens.weight" in state["model"]


def import_fairseq(path: str, data: str, src: str, tgt: str, out_dir: str) -> Path:
    """Convert; returns the model.pt written. `data`: the fairseq data directory the model was trained on (its
    dict.<src>.txt and dict.<tgt>.txt give the vocabulary sizes and are copied beside the model)."""
    dicts = {lang: Path(data) / f"dict.{lang}.txt" for lang in (src, tgt)}
    for dict_path in dicts.values():
        if not dict_path.exists():
            raise UserError(
                f"{dict_path}: missing; --data must be the fairseq data directory the model was trained "
                f"on (with dict.{src}.txt and dict.{tgt}.txt)"
            )
    src_dict, tgt_dict = Dictionary.load(dicts[src]), Dictionary.load(dicts[tgt])
    state = checkpoint.load(path)
    if not is_fairseq_checkpoint(state):
        raise UserError(f"{path}: not a fairseq Transformer checkpoint (no encoder.embed_tokens.weight in 'model')")
    config = model_config(fairseq_args(state, path), src_dict, tgt_dict, path)
    for side, dictionary, lang in (("encoder", src_dict, src), ("decoder", tgt_dict, tgt)):
        rows = state["model"][f"{side}.embed_tokens.weight"].size(0)
        if rows != len(dictionary):
            raise UserError(
                f"{dicts[lang]}: {len(dictionary)} symbols, but the checkpoint's {side} embedding has "
                f"{rows} rows; expected the dictionary the model was trained with"
            )
    model = build("transformer", config)
    try:
        model.load_state_dict(convert_weights(state["model"], config))
    except (KeyError, RuntimeError) as err:
        raise UserError(
            f"{path}: its weights do not fit a {config['encoder_layers']}+{config['decoder_layers']}-layer "
            f"d={config['d_model']} Transformer ({str(err).splitlines()[0]})"
        ) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for dict_path in dicts.values():
        if dict_path.resolve() != (out / dict_path.name).resolve():
            shutil.copy(dict_path, out / dict_path.name)
    target = out / "model.pt"
    checkpoint.save(
        target,
        {
            "model": model.state_dict(),
            "model_name": "transformer",
            "model_config": model.config.to_dict(),
            "imported_from": str(path),
            "dictionaries": checkpoint.dictionaries(src_dict, tgt_dict),
        },
    )
    return target
