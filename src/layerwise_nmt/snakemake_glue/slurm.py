"""A workaround for snakemake-executor-plugin-slurm (2.8.0 and earlier): `sacct` prints the
state of a job cancelled with a plain `scancel` as "CANCELLED by <uid>"; the plugin compares whole strings with
its failure states ("CANCELLED", ...), finds none, takes the job for a running one and waits for it forever. The
old cluster profile had the same bug (Snakemake-Profiles/slurm#22). Reduced to its first word, the state is one
the plugin knows: the job is reported failed, and the rule's `retries` resubmit it (a training resumes)."""

from __future__ import annotations


def normalised(states: dict[str, str] | None) -> dict[str, str] | None:
    """{job id: state} with each state cut to its first word ("CANCELLED by 0" → "CANCELLED")."""
    if not states:
        return states
    return {job: (state.split() or [""])[0] for job, state in states.items()}


def patch_status_query() -> bool | None:
    """Wrap the plugin's status query, once per process; None when the plugin is not installed, False when it has
    changed (no `query_job_status`: a version other than the one constraints.txt pins)."""
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return None
    query = getattr(plugin, "query_job_status", None)
    if query is None:
        return False
    if getattr(query, "lwnmt_normalised", False):
        return True

    async def query_job_status(command: str, logger):
        states, seconds = await query(command, logger)
        return normalised(states), seconds

    setattr(query_job_status, "lwnmt_normalised", True)  # noqa: B010  (mypy: functions have no such attribute)
    plugin.query_job_status = query_job_status
    return True
