"""Inference: batched beam search (decode.py) and its settings (config.py, torch-free), what `lwnmt translate`
decodes, model directories that travel (export), fairseq import, CTranslate2 export, and what figures read out of a
model."""
