"""The wheels a GPU node without internet needs to run the workflow, and only those: the closure of what we use
there (snakemake, sacremoses, subword-nmt, jsonschema, tensorboardX) at the versions constraints.txt pins, minus the
packages its image already has (scripts/node-image-packages.txt, or your node's own list), each as a wheel for its
Python: a binary wheel for that Python and platform where PyPI has one, else a wheel built here from the sdist
(pure-Python packages such as connection_pool publish only an sdist, which `pip download --only-binary` refuses).

    python scripts/node_wheels.py OUT_DIR [--python-version 3.12] [--image-packages FILE]

    python scripts/node_wheels.py --install DIR OUT_DIR/*.whl     # on the node

Installed on the node by unpacking each wheel into a plain folder on PYTHONPATH (what `pip install --no-deps
--target` does, in a second or two instead of pip's half a minute of the node's allocation; no resolver, nothing
from the image replaced): a venv made from the image's python3, itself a venv, would see the base interpreter's
packages instead of the image's (no torch).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("snakemake", "sacremoses", "subword-nmt", "jsonschema", "tensorboardX")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(top=TOP) -> dict[str, str]:
    """{name: version} of the packages `top` needs, as installed in this environment (the project's venv, built
    from constraints.txt), extras and environment markers honoured for this interpreter."""
    seen: dict[str, str] = {}
    todo = list(top)
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker excludes this interpreter
        seen[name] = dist.version
        for req in dist.requires or []:
            requirement, _, marker = req.partition(";")
            if "extra" in marker or (marker.strip() and not _marker_holds(marker)):
                continue
            todo.append(re.split(r"[ <>=!~\[(]", requirement.strip(), maxsplit=1)[0])
    return seen


def _marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return Marker(marker.strip()).evaluate()


def image_packages(path: Path) -> set[str]:
    return {
        canonical(line.split("#")[0].strip()) for line in path.read_text().splitlines() if line.split("#")[0].strip()
    }


def fetch(name: str, version: str, out: Path, python_version: str) -> str:
    """Download the wheel for the target Python, or build one from the sdist; returns how."""
    binary = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *[f"--platform={p}" for p in PLATFORMS],
        "--platform=any",
        "-d",
        str(out),
        f"{name}=={version}",
    ]
    if subprocess.run(binary, capture_output=True).returncode == 0:
        return "wheel"
    built = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), f"{name}=={version}"]
    result = subprocess.run(built, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(
            f"node_wheels: {name}=={version}: no wheel for Python {python_version} and the sdist did "
            f"not build: {result.stderr.strip().splitlines()[-1:]}"
        )
    return "built from sdist"


def install(site: Path, wheels: list[Path]) -> int:
    """Each wheel's files into `site`; a wheel's <name>.data/purelib and platlib go beside the packages (its
    scripts and headers are not needed: everything runs as `python3 -m`)."""
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    for data in site.glob("*.data"):
        for lib in ("purelib", "platlib"):
            if (data / lib).is_dir():
                shutil.copytree(data / lib, site, dirs_exist_ok=True)
        shutil.rmtree(data)
    print(f"node_wheels: {len(wheels)} wheels unpacked into {site}")
    return 0


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--install"]:
        return install(Path(argv[1]), [Path(w) for w in argv[2:]])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--python-version", default="3.12", help="the GPU node's Python (default: 3.12)")
    parser.add_argument("--image-packages", default=str(ROOT / "scripts" / "node-image-packages.txt"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    have = image_packages(Path(args.image_packages))
    needed = {n: v for n, v in closure().items() if n not in have}
    for name, version in sorted(needed.items()):
        print(f"{name}=={version}: {fetch(name, version, out, args.python_version)}", flush=True)
    size = sum(p.stat().st_size for p in out.glob("*.whl"))
    print(
        f"node_wheels: {len(needed)} wheels, {size / 2**20:.1f} MiB in {out} "
        f"(the image has the other {len(closure()) - len(needed)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
