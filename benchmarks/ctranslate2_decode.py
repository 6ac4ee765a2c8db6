"""CTranslate2, the inference engine MT models are deployed with, as the decoding anchor beside fairseq-generate.

The demo-sized baseline (train_decode_parts.decode_cases.demo_model) is converted with `lwnmt export --format
ctranslate2` and decoded by both, on Multi30k test2016 (1,000 sentences), beam 5, lenpen 1, batch 128:

    lwnmt translate   fp32 (amp none) at 1 and 2 threads, whole process (`python -m layerwise_nmt translate`)
    CTranslate2       float32 at 1 and 2 threads, int8 (quantized when loaded) at 1 and 2, whole process (a Python
                      that imports ctranslate2 only, loads the model, translates, writes)

each its wall time (median of `repeats`, taken in turn so that a change in load hits all alike) and its own loop's
time (ours: the .json's seconds; CTranslate2: around translate_batch). Agreement with our fp32 hypotheses: identical
hypotheses, and the largest difference between CTranslate2's per-token log-probabilities of our hypotheses
(score_batch) and ours; BLEU of each on the BPE-free tokenized text (sacrebleu, tokenize none).

CTranslate2 runs in its own venv (`.ctranslate2-venv`, created on first use from PyPI), never the project's.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".ctranslate2-venv"
VERSION = next(
    line.split("==")[1].strip()
    for line in (ROOT / "constraints.txt").read_text().splitlines()
    if line.startswith("ctranslate2==")
)
MAX_DECODING_LENGTH = 256  # one limit per batch in CTranslate2; ours is 1.2·|source| + 10 per sentence

# Run by the CTranslate2 venv's Python: the whole process is what is timed from outside.
TRANSLATE = """
import json, sys, time
import ctranslate2
model, sources, out, threads, compute_type, beam, batch, limit = sys.argv[1:9]
translator = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, intra_threads=int(threads),
                                   inter_threads=1)
lines = [line.split() for line in open(sources, encoding="utf-8")]
start = time.perf_counter()
results = translator.translate_batch(lines, beam_size=int(beam), length_penalty=1.0, max_batch_size=int(batch),
                                     max_decoding_length=int(limit))
loop = time.perf_counter() - start
with open(out, "w", encoding="utf-8") as f:
    f.writelines(" ".join(r.hypotheses[0]) + "\\n" for r in results)
print(json.dumps({"loop_s": loop}))
"""

SCORE = """
import json, sys
import ctranslate2
model, sources, targets = sys.argv[1:4]
translator = ctranslate2.Translator(model, device="cpu", intra_threads=2)
src = [line.split() for line in open(sources, encoding="utf-8")]
tgt = [line.split() for line in open(targets, encoding="utf-8")]
print(json.dumps([r.log_probs for r in translator.score_batch(src, tgt, max_batch_size=64)]))
"""


def run(cmd: list[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} … failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def ensure_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV.name} (ctranslate2 {VERSION}) ...", flush=True)
        run([sys.executable, "-m", "venv", str(VENV)])
        run([str(VENV / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", f"ctranslate2=={VERSION}"])
    return python


def convert(model: Path, data: Path, out: Path) -> Path:
    run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "export",
            str(model),
            "--format",
            "ctranslate2",
            "--data",
            str(data),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out",
            str(out),
        ]
    )
    return out


def our_log_probs(model: Path, data: Path, sources: Path, hypotheses: Path) -> list[list[float]]:
    """Our model's log-probability of each token of each hypothesis (and its </s>), forced."""
    import torch
    import torch.nn.functional as F

    from layerwise_nmt.data.io import read_lines
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.inference.decode import load_model

    src_vocab, tgt_vocab = load_pair(data, "de", "en")
    net = load_model(model, src_vocab, tgt_vocab).eval()
    out = []
    with torch.no_grad():
        for source, target in zip(read_lines(sources), read_lines(hypotheses), strict=True):
            ids = tgt_vocab.encode(target)
            logits = net(torch.tensor([src_vocab.encode(source)]), torch.tensor([[tgt_vocab.eos] + ids[:-1]]))
            out.append(F.log_softmax(logits[0].float(), -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist())
    return out


def bleu(hypotheses: Path, reference: Path) -> float:
    import sacrebleu

    def strip(path: Path) -> list[str]:
        return [(line + " ").replace("@@ ", "").strip() for line in path.read_text(encoding="utf-8").splitlines()]

    return sacrebleu.corpus_bleu(strip(hypotheses), [strip(reference)], tokenize="none").score


def ctranslate2_part(
    model: Path, data: Path, sources: Path, reference: Path, settings: dict, work: Path, repeats: int
) -> dict:
    python = ensure_venv()
    converted = convert(model, data, work / "ctranslate2-model")
    commands, hypotheses = {}, {}
    for threads in (1, 2):
        prefix = work / f"ours-{threads}"
        hypotheses[f"lwnmt fp32, {threads} thread(s)"] = Path(f"{prefix}.bpe")
        commands[f"lwnmt fp32, {threads} thread(s)"] = [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "translate",
            str(sources),
            "--model",
            str(model),
            "--data",
            str(data),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out-prefix",
            str(prefix),
            "--threads",
            str(threads),
            "--options",
            json.dumps({**settings, "amp": "none"}),
        ]
        for compute_type in ("float32", "int8"):
            name = f"CTranslate2 {compute_type}, {threads} thread(s)"
            hypotheses[name] = work / f"ct2-{compute_type}-{threads}.txt"
            commands[name] = [
                str(python),
                "-c",
                TRANSLATE,
                str(converted),
                str(sources),
                str(hypotheses[name]),
                str(threads),
                compute_type,
                str(settings["beam"]),
                str(settings["batch_size"]),
                str(MAX_DECODING_LENGTH),
            ]
    walls, loops = {name: [] for name in commands}, {name: [] for name in commands}
    for _ in range(repeats):
        for name, cmd in commands.items():
            print(f"decoding: {name} ...", flush=True)
            start = time.perf_counter()
            printed = run(cmd)
            walls[name].append(time.perf_counter() - start)
            if name.startswith("lwnmt"):
                loops[name].append(json.loads(Path(f"{hypotheses[name].with_suffix('')}.json").read_text())["seconds"])
            else:
                loops[name].append(json.loads(printed.splitlines()[-1])["loop_s"])
    ours = hypotheses["lwnmt fp32, 2 thread(s)"]
    ours_lines = ours.read_text(encoding="utf-8").splitlines()
    theirs = json.loads(run([str(python), "-c", SCORE, str(converted), str(sources), str(ours)]))
    gap = max(
        abs(a - b)
        for x, y in zip(our_log_probs(model, data, sources, ours), theirs, strict=True)
        for a, b in zip(x, y, strict=True)
    )
    rows = {}
    for name in commands:
        lines = hypotheses[name].read_text(encoding="utf-8").splitlines()
        rows[name] = {
            "whole_process_s": statistics.median(walls[name]),
            "whole_process_runs": walls[name],
            "loop_s": statistics.median(loops[name]),
            "identical_to_ours_fp32": sum(a == b for a, b in zip(lines, ours_lines, strict=True)),
            "bleu_tokenized": bleu(hypotheses[name], reference),
        }
    return {
        "sentences": len(ours_lines),
        "settings": settings,
        "max_decoding_length": MAX_DECODING_LENGTH,
        "ctranslate2": VERSION,
        "repeats": repeats,
        "max_log_prob_difference_on_our_hypotheses": gap,
        "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def report(part: dict) -> None:
    print(
        f"\ndecoding the demo baseline with CTranslate2 {part['ctranslate2']}, {part['sentences']} sentences, beam "
        f"{part['settings']['beam']}; per-token log-probabilities within "
        f"{part['max_log_prob_difference_on_our_hypotheses']:.1e} of ours"
    )
    print(f"{'system':<34} {'whole-process s':>15} {'loop s':>7} {'same hyps':>9} {'BLEU':>6}")
    for name, row in part["rows"].items():
        print(
            f"{name:<34} {row['whole_process_s']:15.2f} {row['loop_s']:7.2f} "
            f"{row['identical_to_ours_fp32']:>5}/{part['sentences']} {row['bleu_tokenized']:6.2f}"
        )
