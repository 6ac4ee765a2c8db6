"""Model architectures: one shared Transformer plus one small module per paper, chosen by name."""
