# collect → tables: each paper table from its rows' score.json files and the paper numbers in the config.


def table_spec(paper, table):
    """Rows resolved to (paper numbers, run state and reason, score.json paths of every seed)."""
    spec = config["papers"][paper]["tables"][table]
    rows = []
    for row in spec["rows"]:
        out = {"label": row["label"], "paper": row.get("paper", {})}
        if "experiment" in row:
            status = cfg.experiment_status(config, row["experiment"])
            out["state"], out["reason"] = status.state, status.reason
            if status.runnable:
                e = cfg.experiment(config, row["experiment"])
                out["scores"] = [f"{cfg.experiment_dir(config, e['name'], s)}/score.json" for s in e["seeds"]]
        else:
            quoted = "quoted_from" in row
            out["state"] = "quoted" if quoted else "blocked"
            out["reason"] = f"quoted from {row['quoted_from']}" if quoted else row.get("not_run", "no experiment")
        rows.append(out)
    return {"paper": paper, "table": table, "caption": spec.get("caption", ""), "scale": spec.get("scale", ""),
            "metric": spec.get("metric", "bleu"), "rows": rows}


rule table:
    input:
        lambda w: [path for row in table_spec(w.paper, w.table)["rows"] for path in row.get("scores", [])],
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
