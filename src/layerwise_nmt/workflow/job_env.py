"""What the workflow's jobs inherit from the Snakemake that runs them (workflow/rules/common.smk sets it), kept
torch-free: Snakemake imports it while it builds the DAG.

- PATH: the interpreter that runs Snakemake first, so that a rule's `python -m layerwise_nmt` is the environment
  the workflow was started from, not whichever `python` a user's PATH finds first (a `.venv/bin/snakemake` run
  without activating the venv would otherwise start the system's Python). A rule's conda env (`--use-conda`) still
  wins: Snakemake activates it inside the job's shell, which puts the env's bin/ in front of this one.
- WORKFLOW_RUN: which run of Snakemake started the job; the retry of a training that failed on a config error
  exits at once (a retry meets the same error) and a later run tries again.
- WORKFLOW_PID: the Snakemake process that schedules the jobs. A training stopped by Ctrl-C tells it to stop too
  (`stop_the_workflow`): a Snakemake that did not see the Ctrl-C itself (one started where SIGINT is ignored, as a
  non-interactive shell's background job) would otherwise retry the training that the user just stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

WORKFLOW_PID = "LWNMT_WORKFLOW_PID"
# One Snakemake run (its process and start), the same for every attempt of a job within it: a training that met a
# config error tells its own retry from a later run's first attempt by it (cli/train.py)
WORKFLOW_RUN = "LWNMT_WORKFLOW_RUN"


def job_path(path: str | None, executable: str = sys.executable) -> str:
    """PATH with the directory of `executable` first (unchanged when it is first already)."""
    first = os.path.dirname(executable)
    entries = [p for p in (path or "").split(os.pathsep) if p]
    if entries[:1] == [first]:
        return os.pathsep.join(entries)
    return os.pathsep.join([first, *entries])


def _ancestors(pid: int) -> list[int]:
    """The parent chain of process `pid` up to init, from /proc (empty where there is none)."""
    chain = []
    while pid > 1 and len(chain) < 64:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; the name may hold spaces
        chain.append(pid)
    return chain


def stop_the_workflow() -> bool:
    """Ask the Snakemake that runs this job (WORKFLOW_PID) to stop: SIGTERM, which Snakemake takes as "start no new
    job and no retry, then exit". Only when that process is this one's ancestor: a SLURM job inherits the variable
    from the submitting host, where the number names another process. Whether it was sent."""
    try:
        pid = int(os.environ.get(WORKFLOW_PID, ""))
    except ValueError:
        return False
    if pid <= 1 or pid not in _ancestors(os.getpid()):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return False
    return True
