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
        spec=R.translate_spec,  # the decoding's settings only: a score edit does not decode again
        prefix=R.decoded_prefix,
    shell:
        "python -m layerwise_nmt translate {input.src:q} --model {input.model:q} --spec {params.spec:q}"
        " --out-prefix {params.prefix} --threads {threads} --detokenize --gpus {resources.gpu} 2> {log:q}"


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
        spec=R.heldout_translate_spec,
        prefix=lambda w: f"{R.run_dir(w)}/heldout.{w.heldout}",
    shell:
        "python -m layerwise_nmt translate {input.src:q} --model {input.model:q} --spec {params.spec:q}"
        " --out-prefix {params.prefix} --threads {threads} --detokenize --gpus {resources.gpu} 2> {log:q}"


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
        spec=R.score_spec,
        stacked=lambda w: "--stacked-refs" if R.stacked_references(w) else "",
    shell:
        "python -m layerwise_nmt score {input.hyp:q} --ref {input.ref:q} {params.stacked} --source {input.src:q}"
        " --spec {params.spec:q} --decoding {input.decoding:q} --out {output:q} 2> {log:q}"


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
        spec=R.inspect_spec,
    shell:
        "python -m layerwise_nmt inspect {input.model:q} --spec {params.spec:q} --out {output:q} 2> {log:q}"
