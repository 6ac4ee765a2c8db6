# fetch → extract: raw files from the official URL or a local mirror, always checksummed.


rule fetch:
    output:
        "results/downloads/{dataset}/{archive}",
    params:
        url=lambda w: get_download(w)["url"],
        checksum=lambda w: checksum_flag(cfg.checksum_of(get_download(w))),
        manual=lambda w: f"--manual {get_download(w)['manual']!r}" if "manual" in get_download(w) else "",
    log:
        "results/logs/fetch/{dataset}/{archive}.log",
    retries: 2
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m layerwise_nmt fetch {params.url:q} {output:q} {params.checksum} {params.manual} 2> {log:q}"


rule extract:
    input:
        lambda w: get_source(w).path,
    output:
        "results/raw/{dataset}/{file}",
    params:
        args=lambda w: " ".join(
            [
                f"--archive --member {get_source(w).member}" if get_source(w).member else "",
                "--archive" if get_source(w).is_archive and not get_source(w).member else "",
                checksum_flag(get_source(w).checksum),
                checksum_flag(get_source(w).archive_checksum, prefix="archive-"),
            ]
        ),
        where=lambda w: get_source(w).where,
    log:
        "results/logs/extract/{dataset}/{file}.log",
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m layerwise_nmt extract {input:q} {output:q} {params.args} --where {params.where:q} 2> {log:q}"
