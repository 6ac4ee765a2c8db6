"""Everything before training: fetching, corpus readers, tokenization, cleaning, BPE, vocabularies, binarization."""
