"""A trained model as a directory that travels: everything `lwnmt translate --model DIR` needs to turn raw text into
translations on another machine, and nothing from the checkout.

The layout is fairseq's hub layout for the parts it covers (the model archives `fairseq.hub_utils.from_pretrained`
loads, which `lwnmt import-fairseq` already reads): the weights in `model.pt`, one `dict.<lang>.txt` per language
(a joint dictionary written twice, as fairseq's joined-dictionary models ship it) and subword-nmt's `bpecodes`. Our
`model.pt` is our checkpoint, not fairseq's: fairseq's format has no place for the papers' models. What fairseq
leaves to the command line (tokenizer, casing, detokenizer, language pair, beam settings) is in `lwnmt.json`, with the
experiment's settings, the training precision, the commit and a sha256 of every file, checked on loading:

    DIR/model.pt  dict.<src>.txt  dict.<tgt>.txt  [bpecodes]  lwnmt.json
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

from .. import UserError
from ..job_specs import ExportSpec
from ..checkout import source_tree
from ..data.io import check_folders

log = logging.getLogger(__name__)
MANIFEST = "lwnmt.json"
FORMAT = "lwnmt-model-dir/1"
MANIFEST_KEYS = ("src", "tgt", "files", "tokenize", "decode", "sha256")  # what translating with it reads
CODES = "bpecodes"  # fairseq's name (`--bpe subword_nmt --bpe-codes bpecodes`)
# what the exported model.pt keeps of a final model or an averaged one: no optimizer, no RNG, no paths
KEPT = (
    "model",
    "model_name",
    "model_class",
    "model_config",
    "dictionaries",
    "progress",
    "final_from",
    "averaged_from",
    "trained_lengths",
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def commit() -> str | None:
    """The checkout's commit, with "-dirty" when tracked files differ from it; None outside a git checkout, and for
    an installed package (whose site-packages may lie in some other repository)."""
    root = source_tree()
    if root is None:
        return None
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root, capture_output=True).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def check_against(state: dict, path: str | Path, model: str, arch: dict, name: str, user=None) -> None:
    """A UserError when the model in `path` was not trained with experiment `name`'s current settings (its model or
    any arch setting: layers, d_model, ...), so that an edited config never decodes with a stale model in silence.
    `user`: the experiment's model from outside the package (a models.UserModel), whose class is imported."""
    from ..models import model_class, settings_of

    if state.get("model_name") != model:
        raise UserError(
            f"{path}: a {state.get('model_name')!r} model, but experiment {name} has model: {model}; "
            f"retrain it (the config changed since)"
        )
    if user is not None and state.get("model_class") != user.target:
        raise UserError(
            f"{path}: built from {state.get('model_class') or 'a built-in model'}, but experiment "
            f"{name}'s model {model} is {user.target}; retrain it (the config changed since)"
        )
    trained = state.get("model_config", {})
    sizes = {k: trained[k] for k in ("src_vocab", "tgt_vocab") if k in trained}
    model_class(model, user)  # a UserError for a model name no longer known
    wanted = settings_of(model, {**arch, **sizes}, user).to_dict()
    differ = [k for k in wanted if k in trained and trained[k] != wanted[k]]
    if differ:
        listed = ", ".join(f"{k}={trained[k]!r} (config: {wanted[k]!r})" for k in differ[:4])
        raise UserError(
            f"{path}: trained with {listed}{' …' if len(differ) > 4 else ''}, not experiment {name}'s "
            f"arch; retrain it (snakemake reruns a training whose settings changed) or undo the edit"
        )


def write(
    model: str | Path,
    out: str | Path,
    src: str,
    tgt: str,
    src_dict: str | Path,
    tgt_dict: str | Path,
    codes: str | Path | None,
    tokenize: dict,
    decode: dict,
    about: dict,
) -> Path:
    """The model directory `out`, written whole or not at all (a temporary directory, renamed)."""
    from ..training.checkpoint import check_dictionaries, load_model, save
    from ..data.vocab import Dictionary

    state = load_model(model)
    dictionaries = Dictionary.load(src_dict), Dictionary.load(tgt_dict)
    check_dictionaries(state, model, *dictionaries)
    out = replaceable(out)
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        kept = {k: state[k] for k in KEPT if k in state}
        save(tmp / "model.pt", {**kept, "languages": {"src": src, "tgt": tgt}})
        files = {"model": "model.pt", "src_dict": f"dict.{src}.txt", "tgt_dict": f"dict.{tgt}.txt"}
        for key, source in (("src_dict", src_dict), ("tgt_dict", tgt_dict)):
            shutil.copyfile(source, tmp / files[key])
        if codes:
            shutil.copyfile(codes, tmp / CODES)
            files["bpe_codes"] = CODES
        manifest = {
            "format": FORMAT,
            "src": src,
            "tgt": tgt,
            "files": files,
            "bpe": {"kind": "subword-nmt", "separator": "@@"} if codes else None,
            "tokenize": tokenize,  # the source side's normalisation + tokenizer (TokenizeOptions), lowercasing included
            "detokenize": {"kind": "moses", "lang": tgt},
            "lowercase": bool(tokenize.get("lowercase")),  # trained on lowercased text: the translations are lowercase
            "decode": decode,
            "model": state.get("model_name"),
            "model_config": state.get("model_config"),
            # a model from outside the package: its class, and the module loading it needs (named by the user)
            **(
                {"model_class": state["model_class"], "needs_module": state["model_class"].split(":")[0]}
                if state.get("model_class")
                else {}
            ),
            "updates": state.get("progress", {}).get("update"),
            "commit": commit(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **about,
            "sha256": {name: sha256(tmp / name) for name in sorted(set(files.values()))},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    except BaseException:  # a missing dictionary, a full disk, Ctrl-C: nothing half-written stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def replaceable(out: str | Path) -> Path:
    """`--out` as an absolute path that may be (re)written: absent, or a model directory an earlier export wrote
    (it has a manifest), which is replaced whole; anything else of the user's is refused before anything is
    written, never deleted."""
    out = Path(out).resolve()
    if out.exists() and not (out.is_dir() and (out / MANIFEST).is_file()):
        raise UserError(
            f"--out {out}: exists and is not a model directory written by `lwnmt export` (no {MANIFEST}); "
            f"expected a new path, or an earlier export's directory to replace"
        )
    if out.parent == out:
        raise UserError(f"--out {out}: the filesystem's root; expected a directory to create")
    check_folders(out)
    return out


def read(directory: str | Path, src: str | None = None, tgt: str | None = None) -> dict:
    """A model directory's manifest, its files checked against their checksums and the languages asked for (if
    any) against the model's; paths in it made absolute."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise UserError(
            f"--model {directory}: a directory without {MANIFEST}; expected a model directory written by "
            f"`lwnmt export` (or a model.pt file with --data)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise UserError(f"{path}: format {found!r}; this lwnmt reads {FORMAT}")
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise UserError(
            f"{path}: no {missing[0]!r} key; expected {', '.join(MANIFEST_KEYS)} (`lwnmt export` "
            f"writes them), an incomplete or hand-edited copy"
        )
    for name, digest in manifest["sha256"].items():
        if not (directory / name).is_file():
            raise UserError(f"{directory / name}: missing from the model directory (listed in {MANIFEST})")
        if sha256(directory / name) != digest:
            raise UserError(f"{directory / name}: sha256 differs from {MANIFEST}'s; an incomplete or altered copy")
    for flag, asked, own in (("--src", src, manifest["src"]), ("--tgt", tgt, manifest["tgt"])):
        if asked is not None and asked != own:
            raise UserError(
                f"{flag} {asked}: the model in {directory} translates {manifest['src']}→"
                f"{manifest['tgt']}; drop {flag} or pick a model for this direction"
            )
    return {**manifest, "dir": str(directory), "paths": {k: str(directory / v) for k, v in manifest["files"].items()}}


def check_languages(state: dict, path: str | Path, src: str, tgt: str) -> None:
    """--src/--tgt against the languages model.pt records (exported ones, and those trained since the languages were
    saved; older ones record none)."""
    recorded = state.get("languages")
    if recorded and (recorded["src"], recorded["tgt"]) != (src, tgt):
        raise UserError(f"--src {src} --tgt {tgt}: {path} translates {recorded['src']}→{recorded['tgt']}")


def spec_for_file(
    model: str | Path,
    data: str | None,
    src: str | None,
    tgt: str | None,
    codes: str | None,
    tokenize: dict,
    decode: dict,
) -> ExportSpec:
    """What exporting a model.pt needs, from its data directory (its dictionaries), languages, BPE codes (None: a
    word-level model), source tokenization and decoding defaults."""
    from ..data.vocab import load_pair

    missing = [flag for flag, value in (("--data", data), ("--src", src), ("--tgt", tgt)) if not value]
    if missing:
        raise UserError(f"{model}: a model.pt needs {', '.join(missing)} (its data directory and languages)")
    assert data is not None and src is not None and tgt is not None  # none missing
    dicts = load_pair(data, src, tgt)
    return ExportSpec(
        src=src,
        tgt=tgt,
        src_dict=str(dicts[0].path),
        tgt_dict=str(dicts[1].path),
        codes=codes,
        tokenize=tokenize,
        decode=decode,
    )


def not_trained(model: str, config_files: list[str]) -> UserError:
    """The error for an experiment's model not trained yet, with the command that trains it. The --config files
    after config.yaml are in it as Snakemake takes them: the command must run as printed (the demo's models need
    --configfile config/demo.yaml)."""
    overlays = config_files[1:]
    flags = f" --configfile {' '.join(overlays)}" if overlays else ""
    return UserError(f"{model}: not trained yet; run `snakemake {model}{flags}` first")


def write_spec(model: str | Path, spec: ExportSpec, out: str | Path) -> Path:
    """`write` from an export spec (grid.export_spec for an experiment's run): the tuned length penalty and the
    training summary (precision, updates, how it stopped) read now, and the model checked against the experiment's
    settings first."""
    from ..training.checkpoint import load_model

    from ..models import UserModel

    replaceable(out)  # before anything is read: a wrong --out is said first
    about, decode = dict(spec.about), dict(spec.decode)
    settings = about.get("settings")
    if settings:
        own = spec.user_model  # the config names its code: importing it is the user's choice
        user = UserModel.from_entry(settings["model"], own) if own else None
        check_against(load_model(model), model, settings["model"], settings["arch"], about["experiment"], user)
    if spec.tuned_lenpen:
        decode["lenpen"] = json.loads(Path(spec.tuned_lenpen).read_text())["lenpen"]
    if spec.training and Path(spec.training).is_file():
        training = json.loads(Path(spec.training).read_text())
        about.update(precision=training.get("precision"), training=training)
    return write(
        model,
        out,
        spec.src,
        spec.tgt,
        spec.src_dict,
        spec.tgt_dict,
        spec.codes,
        spec.tokenize,
        decode,
        about,
    )
