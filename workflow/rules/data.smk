# Raw files from the data mirror, or from the download cache (results/downloads/<key>/<name>, keyed by URL: an
# archive several datasets name is fetched once), downloading into it from the official URL (then known mirrors)
# when it is not there; always checksummed. `fetch` alone fills the cache (e.g. on a login node).


rule fetch:
    output:
        "results/downloads/{key}/{archive}",
    log:
        "results/logs/fetch/{key}/{archive}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=lambda w: R.fetch_args(w),
    shell:
        "python -m layerwise_nmt fetch {output:q} {params.args} 2> {log:q}"


rule extract:
    input:
        R.own_file,  # the user's own file (user_path, local:); a release file's origin is decided when the job runs
    output:
        "results/raw/{dataset}/{file}",
    log:
        "results/logs/extract/{dataset}/{file}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        # what the file is: a new checksum redoes it and what was made from it
        identity=R.raw_identity,
        # where it comes from in this run (the data mirror, the download cache, its URL): derived from the output,
        # so Snakemake does not compare it between runs; a finished run stays finished with or without the mirror
        source=lambda w, output: R.extract_source(w),
        args=lambda w, output: R.extract_args(w),
    shell:
        "python -m layerwise_nmt extract {params.source:q} {output:q} {params.args} 2> {log:q}"
