"""What the workflow's jobs inherit from the Snakemake that runs them (snakefile.py's prepare_jobs sets it), kept
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
- The other way round (`forward_stops`): a SIGINT or SIGTERM sent to Snakemake's process alone (a supervisor, a
  scheduler, `kill <pid>`, a tmux kill) reaches its running jobs as a terminal's Ctrl-C would, so that a training
  checkpoints and stops within seconds; a cluster's jobs are cancelled through the executor (SLURM: scancel).
  Left to itself, Snakemake cancels them on a SIGINT but waits on a SIGTERM for the running jobs to finish, which
  for a training may be days.
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
# What differs from one Snakemake run to the next in every job's environment (the rehearsal's warm process stands in
# for jobs of another run than the one whose environment it started with: rehearsal/forkserver.py)
PER_RUN = (WORKFLOW_PID, WORKFLOW_RUN)


def job_path(path: str | None, executable: str = sys.executable) -> str:
    """PATH with the directory of `executable` first (unchanged when it is first already)."""
    first = os.path.dirname(executable)
    entries = [p for p in (path or "").split(os.pathsep) if p]
    if entries[:1] == [first]:
        return os.pathsep.join(entries)
    return os.pathsep.join([first, *entries])


def parent_of(stat: Path) -> int | None:
    """The parent process named by a /proc/<pid>/stat file, or None where it cannot be read (the process ended) or
    parsed. Read as bytes: the process's name, which comes first in parentheses, is whatever bytes its executable's
    name began with, cut at 15, and may hold spaces, parentheses or half a UTF-8 character."""
    try:
        return int(stat.read_bytes().rsplit(b")", 1)[1].split()[1])  # the field after the state
    except (OSError, IndexError, ValueError):
        return None


def _ancestors(pid: int) -> list[int]:
    """The parent chain of process `pid` up to init, from /proc (empty where there is none)."""
    chain: list[int] = []
    while pid > 1 and len(chain) < 64:
        parent = parent_of(Path(f"/proc/{pid}/stat"))
        if parent is None:
            break
        pid = parent
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


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process below `pid` (its children, theirs, ...), from /proc (empty where there is none). Called from
    a signal handler, where an exception would cancel the stop: a process that cannot be read is left out."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit() and (parent := parent_of(entry / "stat")) is not None:  # None: it ended meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


_stopping: list[int] = []  # the processes asked already: one stop per run, however many signals Snakemake gets


def stop_jobs() -> list[int]:
    """SIGINT to every process below this one, as a terminal's Ctrl-C sends it to the whole foreground group: a
    training checkpoints and exits (saying so in one line), the other jobs end. Once: a training told twice might
    be told the second time after its checkpoint, in its exit. The processes signalled."""
    if _stopping:
        return []
    _stopping.extend(descendants(os.getpid()))
    for pid in _stopping:
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:  # ended meanwhile
            pass
    return list(_stopping)


def forward_stops() -> bool:
    """In Snakemake's own process: make a SIGINT or SIGTERM sent to it alone stop its running jobs (`stop_jobs`)
    before it goes on as it would have: a SIGINT still raises KeyboardInterrupt ("Terminating processes on user
    request"), a SIGTERM still means "start no new job, then exit". SIGTERM's handler is Snakemake's scheduler's
    own, installed when the scheduler starts, so its method is wrapped rather than the signal's handler replaced.
    A SIGINT that is ignored (a non-interactive shell's background job) stays ignored. Whether both are in place."""
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return False
    previous = signal.getsignal(signal.SIGINT)
    if callable(previous) and not getattr(previous, "lwnmt_stops_jobs", False):

        def on_sigint(signum, frame):
            stop_jobs()
            previous(signum, frame)

        setattr(on_sigint, "lwnmt_stops_jobs", True)  # noqa: B010  (mypy: functions have no such attribute)
        signal.signal(signal.SIGINT, on_sigint)
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    graceful = getattr(JobScheduler, "exit_gracefully", None)
    if graceful is None:
        return False
    if not getattr(graceful, "lwnmt_stops_jobs", False):

        def exit_gracefully(self, *args):
            stop_jobs()
            cancel_cluster_jobs(getattr(self, "_executor", None))
            return graceful(self, *args)

        setattr(exit_gracefully, "lwnmt_stops_jobs", True)  # noqa: B010  (mypy: functions have no such attribute)
        JobScheduler.exit_gracefully = exit_gracefully
    return True


def cancel_cluster_jobs(executor) -> bool:
    """A cluster's jobs run outside this process's tree, so `stop_jobs` cannot reach them: ask the executor to
    cancel them (SLURM: scancel, whose SIGTERM makes a training checkpoint), leaving its status checks running, so
    that the scheduler sees them end and exits (`cancel()` would stop the checks too, and the scheduler would wait
    for jobs it no longer hears of). On a thread of its own: a signal handler must not wait for the executor's lock,
    which the interrupted thread may hold. Whether a cancellation was started."""
    import threading

    try:
        from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
    except ImportError:
        return False
    if not isinstance(executor, RemoteExecutor):
        return False

    def cancel() -> None:
        with executor.lock:
            active = list(executor.active_jobs)
        executor.cancel_jobs(active)

    threading.Thread(target=cancel, name="lwnmt-cancel-cluster-jobs", daemon=True).start()
    return True
