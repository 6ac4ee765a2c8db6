# collect → tables: each paper table from its rows' score.json files and the paper numbers in the config.


rule table:
    input:
        lambda w: [path for row in table_spec(w.paper, w.table)["rows"]
                   for paths in row.get("scores", {}).values() for path in paths],
    output:
        multiext("results/tables/{paper}/{table}", ".md", ".csv"),
    params:
        spec=lambda w: json.dumps(table_spec(w.paper, w.table)),
    log:
        "results/logs/tables/{paper}/{table}.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "{LWNMT} table --spec {params.spec:q} --out-prefix results/tables/{wildcards.paper}/{wildcards.table}"
        " 2> {log:q}"
