"""What the Snakemake workflow calls into besides the CLI, torch-free: the jobs' environment (job_env), the SLURM
executor plugin's state fix (slurm) and the rehearsal's scheduler tweak (scheduler)."""
