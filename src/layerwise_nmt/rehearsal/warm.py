"""The rehearsal's warm process (forkserver.py): most of its jobs would otherwise spend more
time starting Python and importing torch than working.

The server is started with the environment each job will have, so that it can stand in for every job's start:
the one Snakemake passes on, plus what snakemake_glue/snakefile.py adds (PYTHONPATH, PATH, LWNMT_ERRORS_ON_STDOUT)
and what Snakemake's shell sets per job (the thread counts, as the rehearsal runs every job on one thread; the
temporary directory). A job whose
environment still differs is declined and runs as a fresh process; the server's log counts both. Snakemake's
benchmark files of the rehearsal's trainings (train.benchmark.tsv) measure the process it started, the waiting
client: their seconds are the job's, their memory and CPU columns the client's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..checkout import ROOT
from .forkserver import ENV

from ..snakemake_glue.job_env import job_path

# the checkout's src/, which the workflow puts first on the jobs' PYTHONPATH (an installed package's server would
# import another copy than its jobs, and decline them all)
SOURCES = ROOT / "src"
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
TMP_VARIABLES = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")
READY_TIMEOUT_S = 300
# How a job reaches the server: Python's start-up imports `sitecustomize` from the module path, and the server's
# folder is on the jobs' PYTHONPATH, so a job running `python -m layerwise_nmt` hands itself over before importing
# anything else; the entry point knows nothing of it. Any other Python a job starts goes on as usual.
STARTUP_HOOK = f"""\
import os, sys
if os.environ.get({ENV!r}) and sys.orig_argv[1:3] == ["-m", "layerwise_nmt"]:
    from layerwise_nmt.rehearsal.forkserver import delegate
    delegate(os.environ[{ENV!r}])
"""


class Server:
    def __init__(self, process: subprocess.Popen | None, socket: str | None, log: Path, home: str | None):
        self.process, self.socket, self.log, self.home = process, socket, log, home

    def job_env(self, env: dict) -> dict:
        """Snakemake's environment: its jobs find the server through it (unchanged when none runs)."""
        return {**hooked(env, self.home), ENV: self.socket} if self.socket and self.home else env

    def stop(self) -> str:
        """Stop the server; its one-line account (jobs served and declined)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.home:
            shutil.rmtree(self.home, ignore_errors=True)
        lines = self.log.read_text(errors="replace").splitlines() if self.log.is_file() else []
        account = next((line for line in reversed(lines) if " jobs served, " in line), None)
        return account or f"fork server: not used (see {self.log})"


def server_env(env: dict) -> dict:
    """A rehearsal job's environment, as Snakemake's shell will give it (but for the shell's own variables): the
    temporary directory is Snakemake's default `tmpdir` resource, the system's."""
    path = os.pathsep.join(filter(None, [str(SOURCES), env.get("PYTHONPATH")]))
    tmp = tempfile.gettempdir()
    return {
        **env,
        "PYTHONPATH": path,
        "PATH": job_path(env.get("PATH")),
        "LWNMT_ERRORS_ON_STDOUT": "1",
        **{k: "1" for k in THREAD_VARIABLES},
        **{k: tmp for k in TMP_VARIABLES},
    }


def hooked(env: dict, home: str) -> dict:
    """`env` with the server's folder, which holds STARTUP_HOOK, first on PYTHONPATH."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))}


def start(directory: Path, env: dict, entry: str) -> Server:
    """Start the server in the rehearsal's working directory (where the jobs run), each job running `entry`
    ("module:function", named by the CLI above this folder); it is ready when its socket exists, which `wait_ready`
    waits for."""
    log = directory / "forkserver.log"
    if not hasattr(os, "fork"):
        return Server(None, None, log, None)
    home = tempfile.mkdtemp(prefix="lwnmt-warm-")  # a short path: a Unix socket's is limited to ~100 bytes
    socket = os.path.join(home, "socket")
    Path(home, "sitecustomize.py").write_text(STARTUP_HOOK)
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "layerwise_nmt.rehearsal.forkserver", socket, entry],
            cwd=directory,
            env={**server_env(hooked(env, home)), ENV: socket},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Server(process, socket, log, home)


def wait_ready(server: Server) -> Server:
    """The server once it listens; a server that died or did not start in time is given up (the jobs then start
    as fresh processes)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while server.socket and not os.path.exists(server.socket):
        if server.process is None or server.process.poll() is not None or time.monotonic() > deadline:
            print(f"fork server did not start (see {server.log}); every job starts its own process", flush=True)
            server.stop()
            return Server(None, None, server.log, None)
        time.sleep(0.2)
    return server
