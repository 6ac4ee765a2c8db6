# fetch → extract: raw files from the official URL (then known mirrors) or a local mirror, always checksummed.
# Downloads are keyed by URL (results/downloads/<key>/<name>): an archive several datasets name is fetched once.


rule fetch:
    output:
        "results/downloads/{key}/{archive}",
    log:
        "results/logs/fetch/{key}/{archive}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=lambda w: fetch_args(w),
    shell:
        "python -m layerwise_nmt fetch {output:q} {params.args} 2> {log:q}"


rule extract:
    input:
        lambda w: get_source(w).path,
    output:
        "results/raw/{dataset}/{file}",
    log:
        "results/logs/extract/{dataset}/{file}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=lambda w: extract_args(w),
    shell:
        "python -m layerwise_nmt extract {input:q} {output:q} {params.args} 2> {log:q}"
