"""The rehearsal's warm process: a job it runs ends exactly as the same command in a fresh process (exit code,
stdout, stderr, files; killed by the signal its client got), and a client it cannot stand in for runs alone."""

import os
import signal
import subprocess
import sys
import time

import pytest

from layerwise_nmt.rehearsal.forkserver import ENV
from layerwise_nmt.rehearsal import warm

pytestmark = pytest.mark.system  # the rehearsal's warm process


@pytest.fixture(scope="module")
def rehearsal_env():
    """The environment `lwnmt rehearse` runs Snakemake in (and starts its server with)."""
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    env.pop(ENV, None)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory, rehearsal_env):
    work, env = tmp_path_factory.mktemp("warm"), rehearsal_env
    started = warm.wait_ready(warm.start(work, env, "layerwise_nmt.cli:run"))
    assert started.socket, (work / "forkserver.log").read_text()
    # a job's environment but for the server's socket: with it (ENV) a command is served, without it runs alone
    job = warm.server_env(started.job_env(env))
    yield started, work, {k: v for k, v in job.items() if k != ENV}
    started.stop()


def lwnmt(args, cwd, env, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def children(pid):
    return [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == pid]


def reading(pid):
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().startswith("0 ")  # blocked in read(): /dev/stdin, opened by the command
    except OSError:
        return False


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_a_served_job_ends_as_a_fresh_process(server, tmp_path):
    started, work, env = server
    (work / "in.txt").write_text("Hello, world!\nA second line.\n")
    commands = [
        ["--version"],
        ["bogus-command"],
        ["extract", str(tmp_path / "missing"), "out.txt"],
        ["tokenize", "in.txt", "tok.txt", "--lang", "en"],
        ["tokenize", "/dev/stdin", "/dev/stdout", "--lang", "en"],
        ["average", str(tmp_path / "no-checkpoints"), "--num", "2", "--by", "epoch", "--out", "avg.pt"],
    ]
    for args in commands:
        fresh = lwnmt(args, work, env, input="Stdin's line, read.\n")
        fresh_file = (work / "tok.txt").read_text() if args[1:2] == ["in.txt"] else None
        served = lwnmt(args, work, {**env, ENV: started.socket}, input="Stdin's line, read.\n")
        assert (served.returncode, served.stdout) == (fresh.returncode, fresh.stdout), args

        def strip(text: str) -> str:  # log times differ
            return "\n".join(line.split(" ", 2)[-1] for line in text.splitlines())

        assert strip(served.stderr) == strip(fresh.stderr), args
        if fresh_file is not None:
            assert (work / "tok.txt").read_text() == fresh_file
    assert {lwnmt(args, work, env).returncode for args in commands} == {0, 1, 2}
    assert "ready" in started.log.read_text() and "declined" not in started.log.read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_the_client_dies_as_the_job_does_and_takes_it_along(server, signum):
    started, work, env = server
    client = subprocess.Popen(
        [sys.executable, "-m", "layerwise_nmt", "tokenize", "/dev/stdin", "out.txt", "--lang", "en"],
        cwd=work,
        env={**env, ENV: started.socket},
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not children(started.process.pid) and time.time() < deadline:
        time.sleep(0.05)
    [job] = children(started.process.pid)
    while not reading(job) and time.time() < deadline:  # inside the command, past the interpreter's start
        time.sleep(0.05)
    client.send_signal(signum)
    client.wait(timeout=30)
    deadline = time.time() + 30
    # SIGINT reaches the job as KeyboardInterrupt, which `lwnmt` turns into exit code 130, as in a fresh process
    assert client.returncode == (130 if signum == signal.SIGINT else -signum)
    while os.path.exists(f"/proc/{job}") and _ppid(job) == started.process.pid and time.time() < deadline:
        time.sleep(0.05)
    assert _ppid(job) != started.process.pid  # the job is gone too
    client.stdin.close()


def test_a_client_it_cannot_stand_in_for_runs_alone(server, tmp_path):
    started, work, env = server
    other = lwnmt(["--version"], work, {**env, ENV: started.socket, "PYTHONHASHSEED": "7"})
    unreachable = lwnmt(["--version"], work, {**env, ENV: str(tmp_path / "no-socket")})
    assert other.returncode == unreachable.returncode == 0 and other.stdout == unreachable.stdout == "lwnmt 0.1.0\n"
    assert "declined --version: another environment (PYTHONHASHSEED)" in started.log.read_text()


def test_each_served_job_draws_its_own_random_seeds(tmp_path):
    """torch and numpy seed their global generators from the OS in each fresh process; so does each served job
    (forked from a process that has imported both)."""
    import numpy
    import torch

    from layerwise_nmt.rehearsal.forkjob import fresh_state

    draws = set()
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            fresh_state()
            (tmp_path / f"seed-{os.getpid()}").write_text(f"{torch.initial_seed()} {numpy.random.randint(1 << 30)}")
            os._exit(0)
        os.waitpid(pid, 0)
        draws.add((tmp_path / f"seed-{pid}").read_text())
    assert len(draws) == 3


def test_every_job_of_a_snakemake_run_of_the_workflow_is_served(server, rehearsal_env, tmp_path):
    """The workflow's jobs as Snakemake starts them: their environment is the one the server started with, plus
    what the Snakefile's prepare_jobs and Snakemake's shell add per run and per job; none of it may decline them."""
    started = server[0]
    before = started.log.read_text().count("declined")
    sources = warm.SOURCES
    (tmp_path / "Snakefile").write_text(
        f"import sys\nsys.path.insert(0, {str(sources)!r})\n"
        "from layerwise_nmt.snakemake_glue.snakefile import prepare_jobs\n"
        f"prepare_jobs({str(sources)!r}, workflow.is_main_process)\n"
        "rule all:\n    input: expand('v{i}.txt', i=range(2))\n"
        "rule version:\n    output: 'v{i}.txt'\n    threads: 1\n"
        "    shell: 'python -m layerwise_nmt --version > {output}'\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "-d", str(tmp_path), "-s", str(tmp_path / "Snakefile")],
        env=started.job_env(rehearsal_env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "v1.txt").read_text() == "lwnmt 0.1.0\n"
    log = started.log.read_text()
    assert log.count("declined") == before, log[-2000:]


def test_the_entry_point_a_user_runs_knows_nothing_of_the_warm_process():
    """The rehearsal reaches its server at the jobs' Python start-up (warm.STARTUP_HOOK); `python -m layerwise_nmt`
    itself only runs the CLI."""
    entry = (warm.SOURCES / "layerwise_nmt" / "__main__.py").read_text()
    assert "rehearsal" not in entry and ENV not in entry and "environ" not in entry
