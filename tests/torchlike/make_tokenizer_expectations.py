#!/usr/bin/python3
"""Write data/tokenizer_expectations.tsv: SentencePiece's own encoding of a
corpus, the reference torchlike's tokenizer must reproduce exactly.

Run once with Debian's python3-sentencepiece (it is not needed by the build):
  /usr/bin/python3 tests/torchlike/make_tokenizer_expectations.py \
      <Llama 2 tokenizer.model> tests/torchlike/data/tokenizer_expectations.tsv
(the SentencePiece model that llama2-tokenizer.bin was exported from).

Each line: the text's UTF-8 bytes in hex, a tab, the ids (no BOS/EOS) separated by spaces.
"""
import sys

import sentencepiece as spm

CORPUS = [
    "Hello, world!",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily.",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "a  b   c    d     e",
    "tab\tseparated\tvalues",
    "\ttab first",
    "line one\nline two\n",
    "crlf line\r\nnext line\r\n",
    "\n\nblank lines\n\n\n",
    "   ",
    " ",
    "x",
    "1234567890 3.14159 -42 1e-5",
    "def f(x):\n    return x * 2  # comment",
    "C'est déjà l'été à Paris, où naïve façade coûte 5 €.",
    "Straße, Ærøskøbing, Łódź, İstanbul",
    "日本語のテキストを分割します。",
    "中文文本测试，包括标点符号。",
    "한국어 텍스트",
    "Emoji: 😀🎉👍🏽 and flags 🇫🇷 family 👨‍👩‍👧",
    "Combining: e\u0301 a\u0300 n\u0303 o\u0308 (decomposed)",
    "Precomposed: é à ñ ö",
    "Ελληνικά και Русский текст",
    "العربية עברית",
    "mixed\u00a0no-break\u2009thin space",
    "<s> literal tags </s> <unk>",
    "quotes “curly” ‘single’ — dashes – …",
    "math ∑ ∫ √ ≤ ≥ ≠ ∞",
    "ZWJ\u200bzero\u200bwidth",
    "a" * 40,
    "Pride and Prejudice: It is a truth universally acknowledged, that a single man "
    "in possession of a good fortune, must be in want of a wife.",
    "\u0000nul and \u0001 control \u007f del",
]


def main():
    sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
    with open(sys.argv[2], "w", encoding="ascii") as out:
        for text in CORPUS:
            ids = sp.encode(text)
            assert sp.decode(ids) == text or "\u0000" in text, text
            out.write(text.encode("utf-8").hex() + "\t" + " ".join(map(str, ids)) + "\n")


if __name__ == "__main__":
    main()
