# The workflow is workflow/Snakefile (where the Snakemake workflow catalog looks); `snakemake` from the checkout
# finds it through this file.
include: "workflow/Snakefile"


workflow.default_target = "all"  # an included file's default target is not the including file's
