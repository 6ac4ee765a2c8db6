import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIRROR = (ROOT / ".." / "shared" / "data-mirror").resolve()
IWSLT_FAIRSEQ = MIRROR / "iwslt14-de-en" / "iwslt14.tokenized.de-en"


@pytest.fixture(scope="session")
def mirror() -> Path:
    if not MIRROR.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the data mirror at {MIRROR}")
        pytest.skip(f"no data mirror at {MIRROR}")
    return MIRROR


def snakemake(workdir: Path, *args: str, mirror: Path | None = None, check: bool = True,
              timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the project's Snakefile in `workdir` with this interpreter's environment (its bin dir first on PATH)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("LWNMT_DATA_MIRROR", None)
    if mirror is not None:
        env["LWNMT_DATA_MIRROR"] = str(mirror)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "--cores", "2",
           *args]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def assert_target_prefix_only(model, src, prev, position: int = 4) -> None:
    """Changing target token `position` leaves the outputs at earlier positions unchanged (and changes later ones)."""
    import torch

    logits = model(src, prev)
    changed = prev.clone()
    changed[:, position] = 9 if int(prev[0, position]) != 9 else 7
    assert torch.allclose(model(src, changed)[:, :position], logits[:, :position], atol=1e-6)
    assert not torch.allclose(model(src, changed)[:, position:], logits[:, position:], atol=1e-4)
