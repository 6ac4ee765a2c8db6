# collect → tables and figures: each from its rows' score.json / metrics.csv files and the paper numbers in config.


rule table:
    input:
        R.table_inputs,
    output:
        multiext("results/tables/{paper}/{table}", ".md", ".csv", ".tex"),
        report(
            "results/tables/{paper}/{table}.html",
            caption="../report/table.rst",
            category="{paper}",
            subcategory="tables",
            labels={"paper": "{paper}", "table": "{table}"},
        ),
    log:
        "results/logs/tables/{paper}/{table}.log",
    conda:
        "../../envs/report.yaml"
    params:
        spec=lambda w: R.table_spec(w.paper, w.table).to_json(),
        caption=lambda w: R.report_caption(w.paper, "tables", w.table),
    shell:
        "python -m layerwise_nmt table --spec {params.spec:q} --out-prefix results/tables/{wildcards.paper}/{wildcards.table}"
        " 2> {log:q}"


rule summary:
    input:
        R.summary_inputs(),
    output:
        multiext("results/summary", ".md", ".csv"),
    log:
        "results/logs/summary.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m layerwise_nmt summary {input:q} --out-prefix results/summary 2> {log:q}"


rule figure:
    input:
        R.figure_inputs,
    output:
        report(
            "results/figures/{paper}/{figure}.png",
            caption="../report/figure.rst",
            category="{paper}",
            subcategory="figures",
            labels={"paper": "{paper}", "figure": "{figure}"},
        ),
        multiext("results/figures/{paper}/{figure}", ".pdf", ".csv"),
    log:
        "results/logs/figures/{paper}/{figure}.log",
    conda:
        "../../envs/report.yaml"
    params:
        spec=lambda w: R.figure_spec(w.paper, w.figure).to_json(),
        caption=lambda w: R.report_caption(w.paper, "figures", w.figure),
    shell:
        "python -m layerwise_nmt figure --spec {params.spec:q} --out-prefix results/figures/{wildcards.paper}/{wildcards.figure}"
        " 2> {log:q}"
