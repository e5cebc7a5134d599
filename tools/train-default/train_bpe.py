#!/usr/bin/python3
"""Train a byte-fallback BPE vocabulary and write it as llama2.c tokenizer.bin.

Layout (the conventions of llama2.c's SentencePiece export):
  0 <unk>, 1 BOS "\\n<s>\\n", 2 EOS "\\n</s>\\n", 3..258 <0x00>..<0xFF>,
  then the single characters (most frequent first), then the merges in the
  order they were learned. A merge of rank r has score -r; the single
  characters score below every merge, -(n_merges + i). Only the scores of
  merged pieces steer the encoder.

Training counts words: the text of each paragraph gets the encoder's dummy
prefix space, and is split before every space, so a piece never spans two
words (" the" yes, "e t" no), as SentencePiece does by default.
"""
import argparse
import collections
import re

from tokenizer import Tokenizer, N_SPECIAL

MIN_CHAR_COUNT = 2  # rarer characters go through byte fallback


def special_pieces():
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"]
    pieces += [("<0x%02X>" % b).encode() for b in range(256)]
    return pieces


def train(paragraphs, vocab_size):
    words = collections.Counter()
    chars = collections.Counter()
    for p in paragraphs:
        text = " " + p
        chars.update(text)
        words.update(re.findall(r" ?[^ ]+| +", text))
    alphabet = [c for c, k in sorted(chars.items(), key=lambda x: (-x[1], x[0]))
                if k >= MIN_CHAR_COUNT]
    n_merges_max = vocab_size - N_SPECIAL - len(alphabet)
    if n_merges_max <= 0:
        raise ValueError("vocab_size %d leaves no room for merges" % vocab_size)
    known = set(alphabet)

    # Each distinct word as a list of symbols; unknown characters are
    # barriers that never merge (they become byte fallbacks).
    wlist = [[c if c in known else None for c in w] for w in words]
    wfreq = [words[w] for w in words]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, syms in enumerate(wlist):
        for a, b in zip(syms, syms[1:]):
            if a is not None and b is not None:
                pair_count[(a, b)] += wfreq[wi]
                where[(a, b)].add(wi)

    merges = []
    vocab = set(alphabet)
    while len(merges) < n_merges_max and pair_count:
        (a, b), k = max(pair_count.items(), key=lambda x: (x[1], x[0]))
        if k <= 0:
            break
        new = a + b
        if new not in vocab:
            vocab.add(new)
            merges.append(new)
        for wi in list(where[(a, b)]):
            syms, f = wlist[wi], wfreq[wi]
            for x, y in zip(syms, syms[1:]):
                if x is not None and y is not None:
                    pair_count[(x, y)] -= f
                    where[(x, y)].discard(wi)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            wlist[wi] = out
            for x, y in zip(out, out[1:]):
                if x is not None and y is not None:
                    pair_count[(x, y)] += f
                    where[(x, y)].add(wi)
        for key in [key for key, v in pair_count.items() if v <= 0]:
            del pair_count[key]

    n_merges = len(merges)
    pieces = special_pieces()
    scores = [0.0] * len(pieces)
    for i, c in enumerate(alphabet):
        pieces.append(c.encode("utf-8"))
        scores.append(float(-(n_merges + i)))
    for r, m in enumerate(merges):
        pieces.append(m.encode("utf-8"))
        scores.append(float(-r))
    return Tokenizer(pieces, scores)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="train.txt, one paragraph a line")
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--out", required=True, help="tokenizer.bin to write")
    args = ap.parse_args()
    with open(args.train, encoding="utf-8") as f:
        paras = [l.rstrip("\n") for l in f if l.strip()]
    tok = train(paras, args.vocab_size)
    if tok.vocab_size != args.vocab_size:
        raise SystemExit("only %d tokens learned, wanted %d" % (tok.vocab_size, args.vocab_size))
    tok.save(args.out)
    print("tokenizer: %d tokens, max piece %d bytes -> %s"
          % (tok.vocab_size, max(len(p) for p in tok.pieces), args.out))


if __name__ == "__main__":
    main()
