import codecs

from subword_nmt.apply_bpe import BPE

from conftest import IWSLT_FAIRSEQ
from layerwise_nmt.data import bpe
from layerwise_nmt.data.vocab import Dictionary
from collections import Counter


def test_word_table_bpe_equals_process_line_on_whitespace_edge_cases(mirror):
    codes = str(IWSLT_FAIRSEQ / "code")
    with codecs.open(codes, encoding="utf-8") as f:
        reference = BPE(f)
    lines = ["", " ", "  a  b ", "hello world", " leading", "trailing ", "a  double", "\r", "x\r", "über@@ alles"]
    assert list(bpe.apply(codes, lines)) == [reference.process_line(line) for line in lines]
    many = [f"wort{i % 700} und noch {i}" for i in range(3000)]
    assert list(bpe.apply(codes, many, workers=2, block_lines=700)) == [reference.process_line(line) for line in many]


def test_dictionary_follows_fairseq_order_and_padding(tmp_path):
    vocab = Dictionary.build(Counter({"b": 3, "a": 3, "c": 5, "d": 1}), padding_factor=8)
    assert vocab.symbols == ["<s>", "<pad>", "</s>", "<unk>", "c", "a", "b", "d"]
    assert vocab.encode("a zz") == [5, vocab.unk, vocab.eos]
    vocab = Dictionary.build(Counter({"x": 1}), padding_factor=8)
    assert len(vocab) == 8 and vocab.symbols[-1] == "madeupword0007"
    vocab.save(tmp_path / "dict.txt")
    assert Dictionary.load(tmp_path / "dict.txt").symbols == vocab.symbols
