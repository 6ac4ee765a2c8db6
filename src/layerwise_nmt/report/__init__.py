"""Regenerated tables and figures: paper numbers from config beside ours from score.json files."""
