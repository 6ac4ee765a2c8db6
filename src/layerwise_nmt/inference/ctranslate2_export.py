"""`lwnmt export --format ctranslate2`: a trained plain Transformer (ours, or a fairseq one imported with `lwnmt
import-fairseq`) as a CTranslate2 model directory, for serving with `ctranslate2.Translator`.

The weights go through CTranslate2's public spec API (`TransformerSpec`), with fairseq's conventions, which our
decoding shares: the vocabulary is each dictionary's symbols in index order (<s> <pad> </s> <unk> first), the
decoder starts from </s>, the source gets its </s> appended by CTranslate2 (`add_source_eos`), and the position
table is written out row for row as our model adds it (fairseq's offset of pad+1 already applied). Beside
CTranslate2's own files: `bpecodes` and `lwnmt.json` (the tokenizer, BPE, casing and language pair of the model
directory it came from, and the translate_batch options that match our decoding defaults):

    DIR/model.bin  config.json  shared_vocabulary.json (or source_/target_vocabulary.json)  [bpecodes]  lwnmt.json

Only the plain Transformer converts: the papers' models (LWC, cross-view decoding, layer aggregation and fusion,
context gates) and the convolutional backbones change the layers themselves, which CTranslate2 has no layer for.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from .. import UserError
from ..job_specs import ExportSpec
from . import export

log = logging.getLogger(__name__)
FORMAT = "lwnmt-ctranslate2-dir/1"  # not export.FORMAT: `lwnmt translate --model` refuses it by name
# ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES, written out so that the CLI offers them without importing it
NO_QUANTIZATION = "none"  # the weights as trained (float32): --quantization's default
QUANTIZATIONS = (
    NO_QUANTIZATION,
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
INSTALL_HINT = "pip install 'layerwise-nmt[ctranslate2]'"


def require_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            f"--format ctranslate2 needs the ctranslate2 package, which is not installed: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def check_convertible(model_name: str | None, config: dict | None, where: str | Path) -> None:
    """A UserError unless the model is the plain Transformer, the one architecture CTranslate2 has."""
    backbone = (config or {}).get("backbone", "transformer")
    if model_name == "transformer" and backbone == "transformer":
        return
    family = f"model {model_name!r}" if model_name != "transformer" else f"backbone {backbone!r}"
    raise UserError(
        f"{where}: a {family} model; CTranslate2 has no counterpart for this model family (it runs the "
        f"plain Transformer only); `lwnmt export` without --format writes a directory that `lwnmt "
        f"translate --model` serves"
    )


def write_spec(model: str | Path, spec: ExportSpec, out: str | Path, quantization: str = NO_QUANTIZATION) -> Path:
    """An experiment's or a model.pt's export (export.write_spec's arguments) as a CTranslate2 directory, by way of
    our model directory, written to a temporary place first."""
    require_ctranslate2()  # before the model directory is written, which may take a while for a big model
    out = export.replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".lwnmt-{out.name}-") as tmp:
        return convert(export.write_spec(model, spec, Path(tmp) / "model"), out, quantization)


def convert(model_dir: str | Path, out: str | Path, quantization: str = NO_QUANTIZATION) -> Path:
    """The model directory `model_dir` (`lwnmt export`'s) as a CTranslate2 directory `out`, written whole or not at
    all; quantization: one of QUANTIZATIONS (none: the weights as trained, float32)."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization {quantization}: expected one of {', '.join(QUANTIZATIONS)}")
    out = export.replaceable(out)
    if not (Path(model_dir) / export.MANIFEST).is_file():
        raise UserError(
            f"{model_dir}: a directory without {export.MANIFEST}; expected a model directory "
            f"`lwnmt export` wrote, a model.pt or an experiment"
        )
    manifest = export.read(model_dir)
    check_convertible(manifest.get("model"), manifest.get("model_config"), manifest["paths"]["model"])
    ctranslate2 = require_ctranslate2()
    from ..data.vocab import Dictionary
    from .decode import load_model

    src_vocab, tgt_vocab = (Dictionary.load(manifest["paths"][key]) for key in ("src_dict", "tgt_dict"))
    model = load_model(manifest["paths"]["model"], src_vocab, tgt_vocab)
    built = "transformer" if type(model).__name__ == "Seq2Seq" else type(model).__name__  # model.pt's own record
    check_convertible(built, model.config.to_dict(), manifest["paths"]["model"])
    spec = transformer_spec(ctranslate2, model, src_vocab, tgt_vocab)
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    spec.save(str(tmp))
    files = {}
    if "bpe_codes" in manifest["paths"]:
        shutil.copyfile(manifest["paths"]["bpe_codes"], tmp / export.CODES)
        files["bpe_codes"] = export.CODES
    kept = {key: value for key, value in manifest.items() if key not in ("format", "files", "sha256", "dir", "paths")}
    about = {
        "format": FORMAT,
        **kept,
        "files": files,
        "converted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "converted_from": {"format": manifest["format"], "sha256": manifest["sha256"]},
        "ctranslate2": {
            "version": ctranslate2.__version__,
            "quantization": quantization,
            "translate_options": translate_options(manifest.get("decode") or {}),
        },
    }
    about["sha256"] = {path.name: export.sha256(path) for path in sorted(tmp.iterdir())}
    (tmp / export.MANIFEST).write_text(json.dumps(about, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def translate_options(decode: dict) -> dict:
    """Our decoding defaults as `Translator.translate_batch` keywords. CTranslate2's length_penalty α divides a
    finished hypothesis's log-probability by its length (with </s>) to the α, as fairseq's --lenpen does; GNMT's
    ((5 + len) / 6)^α has no counterpart there. The length limit a·|src| + b depends on each source, so it is left
    to the caller (docs/usage.md: max_decoding_length)."""
    from .config import BeamConfig

    settings = BeamConfig.from_dict(decode)
    options = {"beam_size": settings.beam, "min_decoding_length": settings.min_len}
    if settings.length_penalty == "fairseq":
        options["length_penalty"] = settings.lenpen
    else:
        log.warning(
            "decode.length_penalty=%s has no CTranslate2 counterpart (its length_penalty is fairseq's "
            "len^α); translate_options in %s leaves it out",
            settings.length_penalty,
            export.MANIFEST,
        )
    return options


def transformer_spec(ctranslate2, model, src_vocab, tgt_vocab):
    """Our Seq2Seq's weights in a TransformerSpec. Both of our layouts match CTranslate2's attention layout: one
    [Q|K|V] matrix for self-attention, [Q] and [K|V] for cross-attention; post-norm layers keep their LayerNorms in
    the same places (after each residual), pre-norm ones add the stacks' final LayerNorm."""
    import numpy as np

    config = model.config
    pre_norm = config.norm == "pre"
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.heads,
        pre_norm=pre_norm,
        activation=ctranslate2.specs.Activation.RELU,
    )

    def array(tensor):
        return np.ascontiguousarray(tensor.detach().float().cpu().numpy())

    def linear(target, source) -> None:
        target.weight = array(source.weight)
        if source.bias is not None:
            target.bias = array(source.bias)

    def norm(target, source) -> None:
        target.gamma, target.beta = array(source.weight), array(source.bias)

    def embedding(target_stack, source) -> None:
        # the rows our model adds at positions 0, 1, …: fairseq's table starts at row pad+1; zeros without positions
        target_stack.position_encodings.encodings = array(
            source.positions[source.first : source.first + config.max_positions]
        )
        target_stack.scale_embeddings = bool(config.scale_embedding)

    embedding(spec.encoder, model.encoder.embed)
    spec.encoder.embeddings[0].weight = array(model.encoder.embed.tokens.weight)
    for ours, theirs in zip(model.encoder.layers, spec.encoder.layer, strict=True):
        linear(theirs.self_attention.linear[0], ours.attn.qkv)
        linear(theirs.self_attention.linear[1], ours.attn.out)
        norm(theirs.self_attention.layer_norm, ours.norm1)
        linear(theirs.ffn.linear_0, ours.ffn.fc1)
        linear(theirs.ffn.linear_1, ours.ffn.fc2)
        norm(theirs.ffn.layer_norm, ours.norm2)
    embedding(spec.decoder, model.decoder.embed)
    spec.decoder.embeddings.weight = array(model.decoder.embed.tokens.weight)
    for ours, theirs in zip(model.decoder.layers, spec.decoder.layer, strict=True):
        linear(theirs.self_attention.linear[0], ours.self_attn.qkv)
        linear(theirs.self_attention.linear[1], ours.self_attn.out)
        norm(theirs.self_attention.layer_norm, ours.norm1)
        linear(theirs.attention.linear[0], ours.cross_attn.q)
        linear(theirs.attention.linear[1], ours.cross_attn.kv)
        linear(theirs.attention.linear[2], ours.cross_attn.out)
        norm(theirs.attention.layer_norm, ours.norm2)
        linear(theirs.ffn.linear_0, ours.ffn.fc1)
        linear(theirs.ffn.linear_1, ours.ffn.fc2)
        norm(theirs.ffn.layer_norm, ours.norm3)
    if pre_norm:
        norm(spec.encoder.layer_norm, model.encoder.final_norm)
        norm(spec.decoder.layer_norm, model.decoder.final_norm)
    linear(spec.decoder.projection, model.output)
    spec.config.unk_token, spec.config.bos_token = tgt_vocab.symbols[tgt_vocab.unk], tgt_vocab.symbols[tgt_vocab.bos]
    spec.config.eos_token = spec.config.decoder_start_token = tgt_vocab.symbols[config.eos]
    spec.config.add_source_eos = True  # as Dictionary.encode: callers pass the BPE'd tokens only
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's
    spec.register_source_vocabulary(list(src_vocab.symbols))
    spec.register_target_vocabulary(list(tgt_vocab.symbols))
    return spec
