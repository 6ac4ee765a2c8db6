"""The fork server's child (forkserver.py): it takes on the client's process state, runs the command, and ends the
way `python -m layerwise_nmt` would have ended: the same exit code, traceback or message on stderr, atexit
handlers, and, for an uncaught KeyboardInterrupt, death by SIGINT."""

from __future__ import annotations

import importlib
import io
import os
import signal
import sys
import threading


def become(request: dict, fds: list[int], closing: tuple, entry: str) -> None:
    """Turn this freshly forked child into the client's job, run `entry` ("module:function"), and exit (never
    returns)."""
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):  # SIGINT: as an interpreter still starting
        signal.signal(signum, signal.SIG_DFL)
    for thing in closing:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    for target, fd in enumerate(fds):  # the client's stdin, stdout and stderr (dup2 makes them inheritable)
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path[:] = request["path"]
    fresh_state()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os._exit(run(entry))


def fresh_state() -> None:
    """What a fresh interpreter would not have inherited: stdout's buffering chosen for the job's own stdout, the
    temporary directory looked up again (TMPDIR may differ), torch's and numpy's global generators seeded anew from
    the OS, as each seeds itself when imported (Python's `random` reseeds itself after a fork)."""
    if isinstance(sys.stdout, io.TextIOWrapper) and not sys.stdout.write_through:
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    if "tempfile" in sys.modules:
        import tempfile

        tempfile.tempdir = None
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()


def run(entry: str) -> int:
    """The command's exit code, its end handled as the interpreter handles it."""
    code = 0
    try:
        module, _, function = entry.partition(":")
        command = getattr(importlib.import_module(module), function)
        command()  # on success it ends the process itself (os._exit(0)) once its streams are flushed
    except SystemExit as exc:
        code = exit_code(exc)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        finish(130)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    return finish(code)


def exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except Exception:
        pass
    return 1


def finish(code: int) -> int:
    """The interpreter's shutdown in its order: wait for non-daemon threads, atexit handlers, flush stdout and
    stderr (a failed flush makes it exit 120)."""
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            code = 120
    return code
