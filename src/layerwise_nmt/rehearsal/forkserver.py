"""A warm process for many short `python -m layerwise_nmt` jobs (the rehearsal's): each fresh job pays
Python's start and the imports of torch, sacremoses, matplotlib … (1.5-3 s of CPU) for a second or two of work.

`python -m layerwise_nmt.rehearsal.forkserver SOCKET MODULE:FUNCTION` imports the package and its libraries once,
then serves, each job running MODULE:FUNCTION (the rehearsal names `layerwise_nmt.cli:run`, what `python -m
layerwise_nmt` runs; the server itself names no command, so it imports nothing that starts it). When the
environment variable LWNMT_FORKSERVER names its socket, `python -m layerwise_nmt` connects at Python's start-up
(warm.py's STARTUP_HOOK, on the jobs' module path), before importing anything heavy, and hands over its arguments,
working directory, environment, umask, module path and standard streams (the file descriptors themselves); the
server forks a child that becomes the job, and the client
waits, forwards the signals it receives to the job, and ends the way the job ended: the same exit code, or killed by
the same signal. The job's stderr, stdout and files are the ones the client was given, so a shell redirect, a log
file or Snakemake's console see what a fresh process would write.

A fork inherits what the server's imports left behind, so the server serves only clients that would have imported
the same things the same way: the same interpreter, module path and environment (the thread counts and TMPDIR
included). Anything else is declined, and the client then runs the command itself, as if no server existed; so
does a client that cannot reach the server. The variables the imports set (joblib's KMP_INIT_AT_FORK, torch's
TORCHINDUCTOR_CACHE_DIR) are in each job's environment from its start, where a fresh job sets them when it imports
the same modules. The server runs no torch operation before forking (OpenMP's threads must not exist yet) and
ends when its parent does. Only `lwnmt rehearse` starts one; users' runs never see the variable.
"""

from __future__ import annotations

import os
import sys

from ..snakemake_glue.job_env import PER_RUN

ENV = "LWNMT_FORKSERVER"
# Set by the job's shell (or, PER_RUN, by each Snakemake run, read by a training when it stops or fails), never read
# by an import in the server; a difference in any other variable makes the server decline.
PER_JOB = frozenset({"PWD", "OLDPWD", "SHLVL", "_", ENV, *PER_RUN})
# Imported only when first used, in every training job: torch._dynamo by torch.optim's first step (~1.4 s),
# tensorboardX by the run's Reporter.
LAZY = ("torch._dynamo", "tensorboardX")
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGTSTP")
MAX_REQUEST = 1 << 24


def delegate(path: str) -> None:
    """Run this process's command in the server at `path` and end as the job ended; return (having done nothing)
    when the server cannot be reached or declines."""
    import json
    import socket
    import struct

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        payload = json.dumps(_request()).encode()
        message = struct.pack("!I", len(payload)) + payload
        sent = sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2))])
        sock.sendall(message[sent:])
        reader = sock.makefile("rb")
        first = reader.readline().split()
    except OSError:
        first = []
    if len(first) != 2 or first[0] != b"pid":
        sock.close()
        return
    pid = int(first[1])
    _forward_signals(pid)
    last = reader.readline().split()
    if len(last) != 2 or last[0] not in (b"exit", b"signal"):
        print(
            f"lwnmt: the fork server at {path} ended before job {pid} did; its exit status is unknown",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)
    _end_as(last[0].decode(), int(last[1]))


def _request() -> dict:
    mask = os.umask(0)
    os.umask(mask)
    return {
        "argv": _argv(),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": mask,
        "path": _path(),
        "executable": os.path.realpath(sys.executable),
        "version": sys.version,
        "package": _package_dir(),
    }


def _argv() -> list[str]:
    """The job's sys.argv as `python -m layerwise_nmt` will have set it: at start-up, where the client runs,
    Python has not yet replaced "-m" by the module's path."""
    if sys.argv[:1] == ["-m"]:
        return [os.path.join(os.path.dirname(_package_dir()), "__main__.py"), *sys.argv[1:]]
    return sys.argv


def _path() -> list[str]:
    """The job's sys.path as it will be: at start-up its first entry, the working directory for `-m`, is not yet
    there."""
    return [os.getcwd(), *sys.path] if sys.argv[:1] == ["-m"] else sys.path


def _package_dir() -> str:
    return os.path.dirname(os.path.realpath(__file__))


def _forward_signals(pid: int) -> None:
    import signal

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)


def _end_as(kind: str, value: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if kind == "signal":
        import signal

        signal.signal(value, signal.SIG_DFL)
        os.kill(os.getpid(), value)
        os._exit(128 + value)  # a signal that does not end a process (it was caught in the job, then re-raised)
    os._exit(value)


# ---------------------------------------------------------------------------------------------------------------
# The server


def preload() -> None:
    """Every module of the package but the rehearsal's own, and through them torch, sacremoses, matplotlib …, and
    what torch imports lazily in a training job (LAZY; torch._dynamo sets TORCHINDUCTOR_CACHE_DIR, from TMPDIR)."""
    import importlib
    import pkgutil

    import layerwise_nmt

    # neither the rehearsal's own modules nor an entry point (a __main__ runs when imported), told by its name, so
    # that this folder names none of the folders above it
    for module in pkgutil.walk_packages(layerwise_nmt.__path__, "layerwise_nmt."):
        if not module.name.startswith(__package__) and module.name.rpartition(".")[2] != "__main__":
            importlib.import_module(module.name)
    for name in LAZY:
        try:
            importlib.import_module(name)
        except ImportError:  # the job that needs it says so itself
            pass


def decline_reason(request: dict, base_env: dict) -> str | None:
    """Why this server cannot stand in for the client's own start (None: it can); `base_env` is the server's
    environment before its imports."""
    if request.get("executable") != os.path.realpath(sys.executable) or request.get("version") != sys.version:
        return "another interpreter"
    if request.get("package") != _package_dir():
        return "another copy of the package"
    if request.get("path", [])[1:] != sys.path[1:]:
        return "another module path"
    env = request.get("env", {})
    differ = sorted(
        k for k in set(env) ^ set(base_env) | {k for k in env if env[k] != base_env.get(k)} if k not in PER_JOB
    )
    if differ:
        return f"another environment ({', '.join(differ[:5])})"
    return None


def serve(path: str, parent: int, entry: str, log=sys.stderr) -> None:
    """Accept jobs on the Unix socket `path` until the process `parent` ends (or SIGTERM); each runs `entry`
    ("module:function")."""
    import select
    import signal
    import socket

    base_env = dict(os.environ)
    preload()
    # What the imports set (joblib: KMP_INIT_AT_FORK): the job's own imports would have set it in its environment.
    imported_env = (
        {k: v for k, v in os.environ.items() if base_env.get(k) != v},
        [k for k in base_env if k not in os.environ],
    )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    jobs: dict = {}  # pid → (its client's connection, whether the job still runs)
    served, declined = 0, 0
    print(f"fork server {os.getpid()} ready on {path}", file=log, flush=True)
    try:
        while os.getppid() == parent:
            watched = [conn for conn, alive in jobs.values() if alive]
            ready = select.select([listener, wake_r, *watched], [], [], 1.0)[0]
            if wake_r in ready:
                while _drain(wake_r):
                    pass
            _reap(jobs)
            for pid, (conn, alive) in list(jobs.items()):
                if alive and conn in ready and not _peek(conn):  # the client is gone (SIGKILL): so is its job
                    jobs[pid] = (conn, False)
                    _kill(pid, signal.SIGKILL)
            if listener in ready:
                conn = listener.accept()[0]
                closing = (listener, wake_r, wake_w, *(c for c, _ in jobs.values()))
                pid = _start(conn, base_env, imported_env, closing, entry, log)
                if pid is None:
                    declined += 1
                else:
                    served += 1
                    jobs[pid] = (conn, True)
    finally:
        print(f"fork server {os.getpid()}: {served} jobs served, {declined} declined", file=log, flush=True)


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _peek(conn) -> bool:
    import socket

    try:
        return bool(conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return True
    except OSError:
        return False


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap(jobs: dict) -> None:
    """Each finished job's status to its client, then its connection closed."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn, _ = jobs.pop(pid, (None, False))
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            line = f"signal {os.WTERMSIG(status)}\n"
        else:
            line = f"exit {os.waitstatus_to_exitcode(status)}\n"
        try:
            conn.sendall(line.encode())
        except OSError:
            pass
        conn.close()


def _start(conn, base_env: dict, imported_env: tuple, closing: tuple, entry: str, log) -> int | None:
    """Read one request and fork its job; the job's pid, or None when declined or unreadable."""
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError) as err:
        print(f"fork server: unreadable request: {err}", file=log, flush=True)
        conn.close()
        return None
    reason = decline_reason(request, base_env) if len(fds) == 3 else "not given three standard streams"
    if reason:
        print(f"fork server: declined {' '.join(request.get('argv', [])[1:3])}: {reason}", file=log, flush=True)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(f"decline {reason}\n".encode())
        except OSError:
            pass
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    log.flush()
    set_by_imports, unset_by_imports = imported_env
    env = {k: v for k, v in request["env"].items() if k not in unset_by_imports}
    request = {**request, "env": {**env, **set_by_imports}}
    pid = os.fork()
    if pid == 0:
        try:
            from . import forkjob

            forkjob.become(request, fds, (*closing, conn), entry)
        finally:
            os._exit(70)  # never back into the server's loop
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"pid {pid}\n".encode())
    except OSError:
        _kill(pid, 9)
    return pid


def _receive(conn) -> tuple[dict, list[int]]:
    import array
    import json
    import socket
    import struct

    conn.settimeout(10)
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    try:
        if len(data) < 4:
            raise ValueError("short header")
        size = struct.unpack("!I", data[:4])[0]
        if size > MAX_REQUEST:
            raise ValueError(f"request of {size} bytes")
        while len(data) < 4 + size:
            chunk = conn.recv(4 + size - len(data))
            if not chunk:
                raise ValueError("the client closed the connection mid-request")
            data += chunk
        request = json.loads(data[4 : 4 + size])
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    conn.settimeout(None)
    return request, list(fds)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or ":" not in argv[1]:
        sys.exit("usage: python -m layerwise_nmt.rehearsal.forkserver SOCKET MODULE:FUNCTION")
    serve(argv[0], os.getppid(), argv[1])


if __name__ == "__main__":
    main()
