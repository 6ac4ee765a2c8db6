# decode (beam search on the test or validation set) → score (sacrebleu): {split}.{bpe,txt,detok,json,score.json}.
# Tokenized BLEU (score.tokenize: none) compares {split}.txt with the tokenized reference text; detokenized BLEU
# (13a, zh, ...) compares the Moses-detokenized {split}.detok with the normalised but untokenized references.
# With decode.tune_lenpen, the validation set is first decoded and scored at each α (lenpen/valid.<α>.*), the best
# one is picked (tuned_lenpen.json), and every decoding of the run uses it.


rule translate:
    input:
        unpack(R.decoding_inputs),
    output:
        multiext("results/{task}/{experiment}/seed{seed}/{split}", ".bpe", ".txt", ".detok", ".json"),
    log:
        "results/{task}/{experiment}/seed{seed}/translate.{split}.log",
    conda:
        "../../envs/train.yaml"
    threads: 2
    resources:
        gpu=min(GPUS_PER_JOB, 1),
    params:
        data=R.data_dir,
        src=lambda w: R.experiment_of(w)["src"],  # not the whole experiment: a score edit must not re-decode
        tgt=lambda w: R.experiment_of(w)["tgt"],
        options=R.decoding_options,
        prefix=R.decoded_prefix,
        # --lenpen-from (except while tuning it), and --user-dir or --user-module for a model of the config's own;
        # still called `tuned`: the shell line is part of what Snakemake compares before it reruns a decoding
        tuned=R.translate_flags,
    shell:
        "python -m layerwise_nmt translate {input.src:q} --model {input.model:q} --data {params.data} --src {params.src}"
        " --tgt {params.tgt} --options {params.options:q} --out-prefix {params.prefix} --threads {threads} --detokenize"
        " --gpus {resources.gpu} {params.tuned}"
        " 2> {log:q}"


# A held-out set (the task's heldout_sets: source only, references elsewhere) translated from its raw text through
# the run's model directory, whose tokenization and BPE make of raw text what the test set's rules make; never scored.
rule translate_heldout:
    input:
        unpack(R.heldout_inputs),
    output:
        multiext("results/{task}/{experiment}/seed{seed}/heldout.{heldout}", ".bpe", ".txt", ".detok", ".json"),
    log:
        "results/{task}/{experiment}/seed{seed}/translate.heldout.{heldout}.log",
    conda:
        "../../envs/train.yaml"
    threads: 2
    resources:
        gpu=min(GPUS_PER_JOB, 1),
    params:
        prefix=lambda w: f"{R.run_dir(w)}/heldout.{w.heldout}",
        tuned=R.translate_flags,
    shell:
        "python -m layerwise_nmt translate {input.src:q} --model {input.model:q} --out-prefix {params.prefix}"
        " --threads {threads} --detokenize --gpus {resources.gpu} {params.tuned} 2> {log:q}"


use rule translate as translate_lenpen with:
    input:
        unpack(lambda w: R.decoding_inputs(w, with_tuned_lenpen=False)),
    output:
        multiext("results/{task}/{experiment}/seed{seed}/lenpen/{split}.{lenpen}", ".bpe", ".txt", ".detok", ".json"),
    log:
        "results/{task}/{experiment}/seed{seed}/lenpen/translate.{split}.{lenpen}.log",


rule score:
    input:
        unpack(R.score_inputs),
    output:
        "results/{task}/{experiment}/seed{seed}/{split}.score.json",
    log:
        "results/{task}/{experiment}/seed{seed}/score.{split}.log",
    conda:
        "../../envs/report.yaml"
    params:
        options=R.score_options,
        stacked=lambda w: "--stacked-refs" if R.stacked_references(w) else "",
        meta=R.score_label,
    shell:
        "python -m layerwise_nmt score {input.hyp:q} --ref {input.ref:q} {params.stacked} --source {input.src:q} --options {params.options:q}"
        " --meta {params.meta:q} --decoding {input.decoding:q} --out {output:q} 2> {log:q}"


use rule score as score_lenpen with:
    output:
        "results/{task}/{experiment}/seed{seed}/lenpen/{split}.{lenpen}.score.json",
    log:
        "results/{task}/{experiment}/seed{seed}/lenpen/score.{split}.{lenpen}.log",


rule pick_lenpen:
    input:
        lambda w: [f"{R.run_dir(w)}/lenpen/{LENPEN_TUNING_SPLIT}.{a}.score.json" for a in R.lenpen_grid(w)],
    output:
        "results/{task}/{experiment}/seed{seed}/tuned_lenpen.json",
    log:
        "results/{task}/{experiment}/seed{seed}/pick_lenpen.log",
    conda:
        "../../envs/report.yaml"
    params:
        grid=lambda w: " ".join(R.lenpen_grid(w)),
    shell:
        "python -m layerwise_nmt pick-lenpen {input:q} --lenpen {params.grid} --out {output:q} 2> {log:q}"


rule inspect:
    """What a figure shows of a trained model (aggregation shares, attention maps), read out of it into JSON once:
    the figure rule draws from files and never loads a model."""
    input:
        unpack(R.inspection_inputs),
    output:
        "results/{task}/{experiment}/seed{seed}/inspect/{paper}.{figure}.{row}.json",
    log:
        "results/{task}/{experiment}/seed{seed}/inspect/{paper}.{figure}.{row}.log",
    conda:
        "../../envs/report.yaml"
    params:
        kind=lambda w: R.inspection_of(w)["kind"],
        options=R.inspection_options,
        user_code=R.inspection_flags,
    shell:
        "python -m layerwise_nmt inspect {input.model:q} --kind {params.kind} --options {params.options:q}"
        " {params.user_code} --out {output:q} 2> {log:q}"
