"""layerwise-nmt: four papers on the lower layers of NMT Transformers, reproduced as one workflow."""

import os

__version__ = "0.1.0"

# OpenMP threads that wait by sleeping, not by spinning (threads.py): set before anything of ours imports torch, whose
# OpenMP runtime reads it once. A spinning thread takes the core a busy neighbour needs (another job, a decode beside
# a training), and every parallel operation then waits for a scheduler turn. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class UserError(Exception):
    """Bad input or configuration: reported as one line naming the file/key and what was expected."""
