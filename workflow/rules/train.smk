# train (per experiment × seed) → average.


rule train:
    input:
        R.train_inputs,
        R.warm_start_model,
    output:
        # The final model is the only output: checkpoints/ (the save dir: also metrics.csv, training.json,
        # tensorboard/) survives a failed or preempted job, and the retry resumes from checkpoints/checkpoint_last.pt.
        "results/{task}/{experiment}/seed{seed}/model.pt",
    log:
        # this attempt's stderr (Snakemake deletes it before each attempt and rerun); every attempt's log is
        # appended to checkpoints/train.log
        "results/{task}/{experiment}/seed{seed}/train.log",
    benchmark:
        "results/{task}/{experiment}/seed{seed}/train.benchmark.tsv"
    priority: R.train_priority
    # a preempted attempt (SIGTERM/SIGUSR1: checkpoint, exit 75) is retried and resumes; a Ctrl-C is not: the
    # workflow stops with it (layerwise_nmt/snakemake_glue/job_env.py), and rerunning the command resumes. A config error
    # (exit 78) would meet a retry again: the retry exits at once without starting (layerwise_nmt/cli/train.py)
    retries: 2
    conda:
        "../../envs/train.yaml"
    threads: 2
    resources:
        # Snakemake counts GPUs (--resources gpu=N locally, --gpus on SLURM); `lwnmt train --gpus` picks which
        # ones (a lock per device) and runs torchrun when there is more than one.
        gpu=GPUS_PER_JOB,
    params:
        spec=R.train_spec,
        data=R.data_dir,
        # only what the trained model depends on: Snakemake reruns a job whose params changed, so the whole
        # experiment here would retrain every seed after a decode or score edit
        src=lambda w: R.experiment_of(w)["src"],
        tgt=lambda w: R.experiment_of(w)["tgt"],
        save_dir=lambda w: grid.save_dir(R.run_dir(w)),
    shell:
        "python -m layerwise_nmt train --spec {params.spec:q} --data {params.data} --src {params.src} --tgt {params.tgt}"
        " --save-dir {params.save_dir} --final {output:q} --threads {threads} --gpus {resources.gpu}"
        " 2> {log:q}"


rule average:
    input:
        "results/{task}/{experiment}/seed{seed}/model.pt",
    output:
        "results/{task}/{experiment}/seed{seed}/averaged.pt",
    log:
        "results/{task}/{experiment}/seed{seed}/average.log",
    conda:
        "../../envs/train.yaml"
    params:
        save_dir=lambda w: grid.save_dir(R.run_dir(w)),
        num=lambda w: R.average_settings(w).num,
        by=lambda w: R.average_settings(w).by,
    shell:
        "python -m layerwise_nmt average {params.save_dir} --num {params.num} --by {params.by} --out {output:q} 2> {log:q}"


# A model directory per trained run (lwnmt export; layerwise_nmt/inference/export.py): what `lwnmt translate --model DIR`
# needs to translate raw text on another machine, with a checksummed manifest.
localrules:
    export,


rule export:
    input:
        unpack(R.export_inputs),
    output:
        directory("results/{task}/{experiment}/seed{seed}/model_dir"),
    log:
        "results/{task}/{experiment}/seed{seed}/export.log",
    conda:
        "../../envs/train.yaml"
    params:
        spec=R.export_spec,
    shell:
        "python -m layerwise_nmt export {input.model:q} --spec {params.spec:q} --out {output:q} 2> {log:q}"
