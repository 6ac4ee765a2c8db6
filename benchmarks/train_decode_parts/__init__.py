"""The parts of benchmarks/train_decode.py, one module each (what it measures, at its top), around what they share:
common.py (paths, models, fairseq's venv, the machine, the JSON) and paired.py (the parts pairing trainer updates)."""
