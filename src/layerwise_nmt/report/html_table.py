"""A paper table as a self-contained HTML page (the Snakemake report shows it as is): its caption above it, as the
papers print theirs (title, metric, scale, what each column means, the precision computed in), one header cell
over each column, each header aligned as its column's cells, and the rows' protocol notes below."""

from __future__ import annotations

import html
import re

import pandas as pd

NUMBER = re.compile(r"^[+\-−]?\d[\d,]*(\.\d+)?")  # "35.00 ± 1.00 (n=3)", "-0.07", "19.08M", "1,000", "1.20×"

STYLE = """
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; margin: 1em;
       color: #222; }
table.lwnmt-table { border-collapse: collapse; font-size: 13px; }
table.lwnmt-table caption { caption-side: top; text-align: left; padding-bottom: 0.6em; max-width: 70em;
                            line-height: 1.4; }
table.lwnmt-table caption .title { font-weight: bold; font-size: 15px; }
table.lwnmt-table th, table.lwnmt-table td { padding: 3px 10px; text-align: left; vertical-align: top; }
table.lwnmt-table thead th { border-top: 2px solid #222; border-bottom: 1px solid #222; white-space: nowrap; }
table.lwnmt-table tbody tr:last-child td { border-bottom: 2px solid #222; }
table.lwnmt-table .num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.lwnmt-table td.status { max-width: 30em; }
.notes { font-size: 12px; max-width: 70em; }
"""


def numeric_columns(shown: pd.DataFrame, not_run: str) -> set[str]:
    """Columns whose every filled cell starts with a number: right-aligned, header and cells alike."""
    out = set()
    for column in shown.columns:
        values = [str(v) for v in shown[column] if str(v) != not_run]
        if values and all(NUMBER.match(v) for v in values):
            out.add(column)
    return out


def page(shown: pd.DataFrame, *, title: str, caption_lines: list[str], notes: list[str], not_run: str) -> str:
    """The table as an HTML document: `caption_lines` (metric, scale, legend, precision) in its <caption>, one
    <th> per column of `shown`, `notes` as a list under it."""
    numeric = numeric_columns(shown, not_run)

    def cls(column: str) -> str:
        names = (["num"] if column in numeric else []) + (["status"] if column == "status" else [])
        return f' class="{" ".join(names)}"' if names else ""

    head = "".join(f'<th scope="col"{cls(c)}>{html.escape(str(c))}</th>' for c in shown.columns)
    body = "\n".join(
        "<tr>"
        + "".join(f"<td{cls(c)}>{html.escape(str(v))}</td>" for c, v in zip(shown.columns, r, strict=True))
        + "</tr>"
        for r in shown.itertuples(index=False)
    )
    caption = f'<span class="title">{html.escape(title)}</span>' + "".join(
        f"<br>\n{html.escape(line)}" for line in caption_lines if line
    )
    listed = "".join(f"<li>{html.escape(note)}</li>" for note in notes)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}'
        f'</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<table class="lwnmt-table">\n'
        f"<caption>{caption}</caption>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"
        + (
            f"<div class=\"notes\"><p>Notes (the rows' protocol, from their experiments' descriptions):</p>"
            f"<ul>{listed}</ul></div>\n"
            if notes
            else ""
        )
        + "</body>\n</html>\n"
    )
