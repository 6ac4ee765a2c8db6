"""What the Snakemake workflow runs in Snakemake's own process, besides the CLI its jobs call, torch-free: what
workflow/rules/common.smk calls when the Snakefile is read (snakefile), the jobs' environment (job_env), the SLURM
executor plugin's state fix (slurm). Not the workflow itself: that
is workflow/, the Snakemake rules."""
