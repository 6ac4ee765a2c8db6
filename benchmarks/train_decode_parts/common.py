"""What the parts of benchmarks/train_decode.py share: the checkout's paths, the models they train, fairseq's own venv
and commands, the CPU a run's figures are filed under and its measured peak FLOP/s, the demo's prepared data, and the
JSON every CPU's figures are recorded in.

fairseq runs in its own venv (`.fairseq-venv`, Python 3.10 from pyenv; created on first use, ~2 minutes); the
project never imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("LWNMT_DATA_MIRROR") or ROOT / "data-mirror").resolve()  # or a link here
FAIRSEQ_VENV = ROOT / ".fairseq-venv"
FAIRSEQ_BIN = FAIRSEQ_VENV / "bin"
THREADS = 2
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
LAYERS = ["--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
MODELS = {
    "iwslt": {
        "title": "transformer_iwslt_de_en (512/1024/4, 6+6), max_tokens 4096",
        "max_tokens": 4096,
        "ours": {"preset": "iwslt", "encoder_layers": 6, "decoder_layers": 6, "tie": "decoder", "dropout": 0.3},
        "fairseq": ["--arch", "transformer_iwslt_de_en", "--share-decoder-input-output-embed", "--dropout", "0.3"],
    },
    "demo": {
        "title": "config/demo.yaml's baseline (256/1024/4, 3+3), max_tokens 1024",
        "max_tokens": 1024,
        "ours": {"preset": "small", "encoder_layers": 3, "decoder_layers": 3, "tie": "all", "dropout": 0.1},
        "fairseq": [
            "--arch",
            "transformer",
            "--share-all-embeddings",
            "--encoder-embed-dim",
            "256",
            "--decoder-embed-dim",
            "256",
            "--encoder-ffn-embed-dim",
            "1024",
            "--decoder-ffn-embed-dim",
            "1024",
            "--encoder-layers",
            "3",
            "--decoder-layers",
            "3",
            "--dropout",
            "0.1",
            *LAYERS,
        ],
    },
}
DEMO_DATA = ROOT / "results/multi30k_deen/data"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if result.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def ensure_fairseq() -> None:
    if (FAIRSEQ_BIN / "fairseq-train").exists():
        return
    python310 = sh(["pyenv", "root"]).stdout.strip() + "/versions/3.10.13/bin/python"
    print("creating .fairseq-venv (fairseq 0.12.2, torch 1.13.1) ...", flush=True)
    sh([python310, "-m", "venv", str(FAIRSEQ_VENV)])
    pip = [str(FAIRSEQ_BIN / "pip"), "install", "--quiet"]
    sh(pip + ["pip<24.1"])
    sh(pip + ["torch==1.13.1", "numpy<1.24", "cython"])
    sh(pip + ["fairseq==0.12.2"])


def fairseq_cli(tool: str) -> list[str]:
    """The command running fairseq_cli.<tool> (generate, interactive) on a loaded checkpoint. fairseq 0.12.2 +
    torch 1.13 crash in the BetterTransformer encoder fast path of a loaded post-norm checkpoint ("Mask Type should
    be defined", fairseq issues #4858/#4899); the driver turns that path off, as in training mode, which computes the
    same layer."""
    driver = (
        "import sys, fairseq.modules.transformer_layer as tl\n"
        "load = tl.TransformerEncoderLayerBase._load_from_state_dict\n"
        "def no_bt(self, *a, **k):\n    load(self, *a, **k)\n    self.load_to_BT = False\n"
        "tl.TransformerEncoderLayerBase._load_from_state_dict = no_bt\n"
        f"from fairseq_cli.{tool} import cli_main\nsys.argv = ['fairseq-{tool}'] + sys.argv[1:]\ncli_main()\n"
    )
    return [str(FAIRSEQ_BIN / "python"), "-c", driver]


def fairseq_generate_command(data: Path, checkpoint: Path, settings: dict, subset: str = "test") -> list[str]:
    """fairseq-generate on the CPU with a decode's settings (beam, lenpen, max_len_a/b, batch_size)."""
    return fairseq_cli("generate") + [
        str(data),
        "--path",
        str(checkpoint),
        "--gen-subset",
        subset,
        "--cpu",
        "--beam",
        str(settings["beam"]),
        "--lenpen",
        str(settings["lenpen"]),
        "--max-len-a",
        str(settings["max_len_a"]),
        "--max-len-b",
        str(settings["max_len_b"]),
        "--batch-size",
        str(settings["batch_size"]),
        "--num-workers",
        "0",
    ]


def machine() -> dict:
    """The CPU this run's figures belong to, as PyTorch sees it (ATEN_CPU_CAPABILITY lowers the kernel level)."""
    import torch

    from layerwise_nmt.training.precision import cpu_flags, cpu_capability, cpu_has_native_bf16, cpu_model

    emulated = {k: os.environ[k] for k in AVX2_ENV if k in os.environ}
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    return {
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "pytorch_cpu_capability": cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "threads": THREADS,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "isa_limits": emulated or None,
    }


def machine_label(info: dict) -> str:
    return f"{info['cpu']}, PyTorch kernels at {info['pytorch_cpu_capability']}" + (
        " (emulated AVX2-only CPU)" if info["isa_limits"] else ""
    )


def measured_peak(size: int = 2048, repeats: int = 8) -> dict:
    """FLOP/s of the fastest of `repeats` size³ matmuls per precision, at THREADS threads."""
    import torch

    torch.set_num_threads(THREADS)
    peak = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        peak[name] = 2 * size**3 / min(times)
    peak["method"] = (
        f"measured: fastest of {repeats} {size}x{size} @ {size}x{size} torch.matmul per precision, "
        f"{THREADS} threads, on this machine at this time"
    )
    return peak


def parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())  # a tied matrix is one parameter, counted once


def ensure_demo_data() -> Path:
    """`make demo`'s prepared Multi30k (BPE, joint dictionary, binarized), made by its own rules if absent."""
    files = ["bpe/test.de-en.de", "vocab/dict.joint.txt"] + [
        f"bin-joint/{split}.de-en.{lang}.{kind}.npy"
        for split in ("train", "valid")
        for lang in ("de", "en")
        for kind in ("tokens", "offsets")
    ]
    if not all((DEMO_DATA / f).exists() for f in files):
        targets = [str(DEMO_DATA.relative_to(ROOT) / f) for f in files]  # before the list options, which take all
        sh(
            [
                str(Path(sys.executable).parent / "snakemake"),
                *targets,
                "--cores",
                str(THREADS),
                "--configfile",
                "config/demo.yaml",
                "--quiet",
                "rules",
            ],
            cwd=ROOT,
        )
    return DEMO_DATA


def demo_training_data() -> Path:
    """The demo's binarized training set (only its training side is read): made by `make demo` or here."""
    trained_on = DEMO_DATA / "bin-joint"
    return trained_on if (trained_on / "train.de-en.en.tokens.npy").exists() else ensure_demo_data() / "bin-joint"


def plain(value):
    """A measurement as JSON holds it: tensors and numpy scalars or arrays as numbers or lists, paths as text."""
    if hasattr(value, "tolist"):  # torch.Tensor, numpy scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} in the benchmark's results: not JSON ({value!r})")


def record(out: Path, result: dict) -> None:
    """Write every CPU's measurements to `out`, whichever parts this run measured; serialised before the file is
    touched, so that a value JSON cannot hold leaves the earlier file whole."""
    text = json.dumps(result, indent=2, default=plain) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"written {out}")
