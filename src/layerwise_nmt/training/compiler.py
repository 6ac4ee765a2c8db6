"""`compile: true`: the model's forward (and so its backward) compiled by torch.compile's default compiler, Inductor.

What it is for: a GPU-bound model spends a large share of its update outside the matrix products, in element-wise
kernels each of which reads and writes whole activations (layer norm, dropout, residual adds, ReLU, their
backwards); docs/benchmarks.md's profile of Transformer big put about half of its GPU time there. Inductor fuses
such chains into one kernel each, which the MLPerf Transformer did by hand. The update's own CUDA graphs
(graphs.py) then capture the compiled kernels as they capture eager ones.

The model is compiled once for every batch shape (`dynamic=True`: sizes are symbols, so fixed batch shapes and
fairseq's free ones alike reuse it), at the first training update, and once more at the first validation (eval
mode is another graph). That takes seconds to minutes, which a long run pays once; so it is off by default until
it is measured to pay for the run in question. Compiled code draws dropout's masks with its own random kernels:
a compiled run is exact against itself (resume included) but not mask-for-mask equal to an eager one. `amp: auto`
decides the precision by timing the model uncompiled (precision_probe.py): compiling it per precision would cost
more than the probe saves.
"""

from __future__ import annotations

import logging
import os
import shutil

import torch

from .. import UserError

log = logging.getLogger(__name__)

BACKEND = "inductor"  # torch.compile's default compiler


def compile_model(net: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """`net` compiled in place (`nn.Module.compile`: its state_dict's names, and so its checkpoints, unchanged)."""
    if device.type == "cpu" and BACKEND == "inductor" and not cpp_compiler():
        raise UserError("compile: true on a CPU needs a C++ compiler (g++ or clang++ on PATH, or $CXX); none found")
    net.compile(backend=BACKEND, dynamic=True)
    log.info(
        "compile: the model's forward and backward compiled by torch.compile (%s, dynamic shapes) at the first "
        "update, its evaluation at the first validation",
        BACKEND,
    )
    return net


def cpp_compiler() -> str | None:
    """What Inductor would build a CPU kernel with, if anything."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
