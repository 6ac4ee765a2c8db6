# decode (beam search on the test or validation set) → score (sacrebleu): {split}.{bpe,txt,detok,json,score.json}.
# Tokenized BLEU (score.tokenize: none) compares {split}.txt with the tokenized reference text; detokenized BLEU
# (13a, zh, ...) compares the Moses-detokenized {split}.detok with the normalised but untokenized references.


rule translate:
    input:
        model=model_for_decoding,
        src=lambda w: f"results/{w.task}/data/bpe/{w.split}.{experiment_of(w)['pair']}.{experiment_of(w)['src']}",
        data=train_inputs,
    output:
        multiext("results/{task}/{experiment}/seed{seed}/{split}", ".bpe", ".txt", ".detok", ".json"),
    params:
        data=data_dir,
        e=experiment_of,
        options=lambda w: json.dumps(experiment_of(w)["decode"]),
        prefix=lambda w: f"{run_dir(w)}/{w.split}",
    threads: 2
    resources:
        gpu=min(GPUS_PER_JOB, 1),
    log:
        "results/{task}/{experiment}/seed{seed}/translate.{split}.log",
    conda:
        "../../envs/train.yaml"
    shell:
        "{LWNMT} translate {input.src:q} --model {input.model:q} --data {params.data} --src {params.e[src]}"
        " --tgt {params.e[tgt]} --options {params.options:q} --out-prefix {params.prefix} --threads {threads} --detokenize"
        " --gpus {resources.gpu}"
        " 2> {log:q}"


rule score:
    input:
        hyp=lambda w: f"{run_dir(w)}/{w.split}.{'txt' if tokenized_bleu(w) else 'detok'}",
        decoding="results/{task}/{experiment}/seed{seed}/{split}.json",
        ref=lambda w: f"results/{w.task}/data/{'text' if tokenized_bleu(w) else 'ref'}/{w.split}."
                      f"{experiment_of(w)['pair']}.{experiment_of(w)['tgt']}",
        src=lambda w: f"results/{w.task}/data/text/{w.split}.{experiment_of(w)['pair']}.{experiment_of(w)['src']}",
    output:
        "results/{task}/{experiment}/seed{seed}/{split}.score.json",
    params:
        options=lambda w: json.dumps(experiment_of(w)["score"]),
        meta=lambda w: json.dumps({"experiment": w.experiment, "task": w.task, "seed": int(w.seed), "split": w.split}),
    log:
        "results/{task}/{experiment}/seed{seed}/score.{split}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "{LWNMT} score {input.hyp:q} --ref {input.ref:q} --source {input.src:q} --options {params.options:q}"
        " --meta {params.meta:q} --decoding {input.decoding:q} --out {output:q} 2> {log:q}"
