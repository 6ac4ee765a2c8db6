"""Scoring: BLEU variants, length buckets and significance tests (score.py, sacrebleu), and their settings
(config.py, torch-free)."""
