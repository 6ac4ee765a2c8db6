"""Training: the loop (loop.py, which knows no paper) and what it is made of: its settings (config.py, torch-free),
optimiser and schedule, loss, progress and metrics, checkpoints, distributed ranks, precision and its CPU probe,
threads, the GPU lock, and checkpoint averaging."""
