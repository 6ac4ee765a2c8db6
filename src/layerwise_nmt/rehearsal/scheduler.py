"""`python -m layerwise_nmt.rehearsal.scheduler ARGS`: `snakemake ARGS` for the rehearsal's run, with the job
scheduler's re-evaluation timers coalesced.

Snakemake's scheduler (9.x, scheduling/job_scheduler.py), after each pass that leaves ready jobs waiting (with many
more jobs than cores: nearly every pass), starts a timer for another pass once the job-rate window has gone by
(--max-jobs-per-timespan, 100 per 1 s by default). That pass starts a timer of its own, so every finished job adds a
chain of timers that lives as long as jobs wait: late in the rehearsal hundreds of passes a second, each one
resetting and sizing every ready job, on one of the machine's cores. Here at most one timer is pending at a time:
a pass still follows every request within the window, which is all the rate limit needs. The timers are daemons,
as nothing is left to schedule once the main thread has finished. Where Snakemake's scheduler has no such method,
it runs unchanged.
"""

from __future__ import annotations

import threading


def coalesce_reevaluations() -> bool:
    """Patch Snakemake's JobScheduler; False where its internals differ (then nothing is changed)."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    if not hasattr(JobScheduler, "_schedule_reevalutation"):
        return False
    lock = threading.Lock()
    pending: dict[int, threading.Timer] = {}

    def schedule_reevaluation(self, delay) -> None:
        with lock:
            timer = pending.get(id(self))
            if timer is not None and timer.is_alive():
                return
            timer = threading.Timer(delay, self._open_jobs.release)
            timer.daemon = True
            pending[id(self)] = timer
            timer.start()

    JobScheduler._schedule_reevalutation = schedule_reevaluation
    return True


def main() -> None:
    from snakemake.cli import main as snakemake

    coalesce_reevaluations()
    snakemake()


if __name__ == "__main__":
    main()
