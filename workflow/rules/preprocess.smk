# tokenize → assemble (pair, clean, hold out) → learn/apply BPE → vocabularies → binarize.


rule tokenize:
    input:
        lambda w: R.get_part(w)[0],
    output:
        # deleted once assembled into text/ (WMT14 En-Fr's tokenized parts take several GB); a later job that needs
        # one again re-creates it, and asking for it as a target keeps it (snakemake --notemp keeps them all)
        temp("results/{task}/data/tok/{part}.{lang}"),
    log:
        "results/logs/{task}/tokenize/{part}.{lang}.log",
    conda:
        "../../envs/preprocess.yaml"
    threads: 8  # WMT corpora: blocks of lines on all cores (Snakemake caps it at --cores)
    params:
        args=R.tokenize_args,
    shell:
        "python -m layerwise_nmt tokenize {input:q} {output:q} --lang {wildcards.lang} {params.args} --workers {threads} 2> {log:q}"


rule normalize:
    input:
        lambda w: R.get_part(w)[0],
    output:
        "results/{task}/data/norm/{part}.{lang}",
    log:
        "results/logs/{task}/normalize/{part}.{lang}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=R.tokenize_args,
    shell:
        "python -m layerwise_nmt tokenize {input:q} {output:q} --lang {wildcards.lang} {params.args} --normalize-only 2> {log:q}"


rule references:
    input:
        R.reference_parts,
    output:
        "results/{task}/data/ref/{split}.{pair}.{lang}",
    log:
        "results/logs/{task}/references/{split}.{pair}.{lang}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=R.concat_args,
    shell:
        "python -m layerwise_nmt concat {input:q} --out {output:q} {params.args} 2> {log:q}"


rule assemble:
    input:
        R.assemble_inputs,
    output:
        multiext("results/{task}/data/text/train.{src}-{tgt}.", "{src}", "{tgt}"),
        multiext("results/{task}/data/text/valid.{src}-{tgt}.", "{src}", "{tgt}"),
        multiext("results/{task}/data/text/test.{src}-{tgt}.", "{src}", "{tgt}"),
        stats="results/{task}/data/text/stats.{src}-{tgt}.json",
    log:
        "results/logs/{task}/assemble.{src}-{tgt}.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        spec=lambda w: R.assemble_spec(w).to_json(),
    shell:
        "python -m layerwise_nmt assemble --spec {params.spec:q} --src {wildcards.src} --tgt {wildcards.tgt}"
        " --out-dir results/{wildcards.task}/data/text --stats {output.stats:q} 2> {log:q}"


use rule assemble as assemble_eval with:
    output:
        multiext("results/{task}/data/text/{split}.{src}-{tgt}.", "{src}", "{tgt}"),
        stats="results/{task}/data/text/stats.{split}.{src}-{tgt}.json",
    log:
        "results/logs/{task}/assemble.{split}.{src}-{tgt}.log",
    wildcard_constraints:
        split=r"(?!(?:train|valid|test)\.)[a-z]+\d*",  # the three standard splits come from `assemble`


rule learn_bpe:
    input:
        R.bpe_learn_texts,  # the sides that do not come BPE-segmented
    output:
        "results/{task}/data/bpe/code",
    log:
        "results/logs/{task}/learn_bpe.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        merges=lambda w: R.task_of(w)["bpe"]["merges"],
        min_frequency=lambda w: R.task_of(w)["bpe"]["min_frequency"],  # the schema's default filled in
    shell:
        "python -m layerwise_nmt learn-bpe {input:q} --out {output:q} --merges {params.merges}"
        " --min-frequency {params.min_frequency} 2> {log:q}"


rule apply_bpe:
    input:
        text="results/{task}/data/text/{split}.{pair}.{lang}",
        codes=R.bpe_codes,  # none: a word-level task, or a side that comes segmented
    output:
        "results/{task}/data/bpe/{split}.{pair}.{lang}",
    log:
        "results/logs/{task}/apply_bpe/{split}.{pair}.{lang}.log",
    conda:
        "../../envs/preprocess.yaml"
    threads: 8
    params:
        codes=lambda w, input: f"--codes {input.codes}" if input.codes else "",  # word-level tasks: a copy
    shell:
        "python -m layerwise_nmt apply-bpe {input.text:q} {output:q} {params.codes} --workers {threads} 2> {log:q}"


rule vocab_joint:
    input:
        lambda w: R.train_texts(w, "bpe"),
    output:
        "results/{task}/data/vocab/dict.joint.txt",
    log:
        "results/logs/{task}/vocab.joint.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        args=R.vocab_params,
    shell:
        "python -m layerwise_nmt vocab {input:q} --out {output:q} {params.args} 2> {log:q}"


use rule vocab_joint as vocab_separate with:
    input:
        lambda w: grid.data_path(w.task, "bpe", f"train.{grid.pair(R.task_of(w))}.{w.lang}"),
    output:
        "results/{task}/data/vocab/dict.{lang}.txt",
    log:
        "results/logs/{task}/vocab.{lang}.log",


rule binarize:
    input:
        text="results/{task}/data/bpe/{split}.{pair}.{lang}",
        vocab=lambda w: grid.data_path(w.task, "vocab", f"dict.{'joint' if w.vocab == 'joint' else w.lang}.txt"),
    output:
        multiext("results/{task}/data/bin-{vocab}/{split}.{pair}.{lang}", ".tokens.npy", ".offsets.npy"),
    log:
        "results/logs/{task}/binarize/{vocab}/{split}.{pair}.{lang}.log",
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m layerwise_nmt binarize {input.text:q} results/{wildcards.task}/data/bin-{wildcards.vocab}/"
        "{wildcards.split}.{wildcards.pair}.{wildcards.lang} --vocab {input.vocab:q} 2> {log:q}"


rule check_reference:
    input:
        lambda w: [grid.data_path(w.task, path) for path in R.task_of(w)["reference"]],
    output:
        "results/{task}/data/reference-check.json",
    log:
        "results/logs/{task}/check_reference.log",
    conda:
        "../../envs/preprocess.yaml"
    params:
        spec=R.reference_check_spec,
    shell:
        "python -m layerwise_nmt check-reference results/{wildcards.task}/data --spec {params.spec:q} --out {output:q} 2> {log:q}"
