#!/usr/bin/python3
"""Write the fixtures that check a C implementation against this pipeline.

encode_expected.txt   held-out paragraphs and the ids tokenizer.py's encoder
                      gives them (no BOS; the dummy-prefix space included),
                      plus a few extra strings for byte fallback and spacing.
                      Format: '#' comments, then pairs of lines
                        T <text, UTF-8, after one space>
                        I <ids, space-separated>
logits_expected.bin   the PyTorch forward pass of model.bin on a fixed token
                      sequence, every position, computed in float64 from the
                      file's fp32 weights and stored as float32. Layout
                      (little-endian): char[4] "ILGT", int32 version 1,
                      int32 n_tokens, int32 vocab_size, int32 tokens[n_tokens],
                      float32 logits[n_tokens][vocab_size].
"""
import argparse
import os
import struct

import torch

from export import read_v0
from tokenizer import BOS, Tokenizer

N_PARAGRAPHS = 24
N_LOGIT_TOKENS = 40
EXTRA = [
    "Once upon a time",
    "  two leading spaces, trailing tab\t",
    "caf\u00e9, na\u00efve \u00a3 5 \u2014 \u4e2d\u6587 \U0001F600 end",
    "Mr.  Darcy\u2019s  \"double  spaced\" line",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--val", required=True, help="val.txt, one paragraph a line")
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    tok = Tokenizer.load(args.tokenizer)
    with open(args.val, encoding="utf-8") as f:
        val = [l.rstrip("\n") for l in f if l.strip()]
    # The first paragraphs of any length >= 40 characters, plus every held-out
    # paragraph with a non-ASCII character (the byte-fallback path).
    chosen = [p for p in val if len(p) >= 40][:N_PARAGRAPHS]
    chosen += [p for p in val if any(ord(c) > 127 for c in p) and p not in chosen]
    with open(os.path.join(args.out_dir, "encode_expected.txt"), "w", encoding="utf-8") as f:
        f.write("# held-out paragraphs of the default model's corpus and the ids\n"
                "# tools/train-default/tokenizer.py encodes them to (no BOS).\n")
        for p in chosen + EXTRA:
            ids = tok.encode(p)
            assert ids == tok.encode_reference(p), p
            f.write("T %s\nI %s\n" % (p, " ".join(map(str, ids))))
    print("encode fixture: %d strings" % (len(chosen) + len(EXTRA)))

    torch.set_num_threads(1)
    model = read_v0(args.model).double()
    tokens = ([BOS] + tok.encode(val[0]))[:N_LOGIT_TOKENS]
    with torch.no_grad():
        logits = model(torch.tensor([tokens]))[0].float()
    with open(os.path.join(args.out_dir, "logits_expected.bin"), "wb") as f:
        f.write(b"ILGT" + struct.pack("<3i", 1, len(tokens), tok.vocab_size))
        f.write(struct.pack("<%di" % len(tokens), *tokens))
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    print("logits fixture: %d positions, argmax of last %d"
          % (len(tokens), int(logits[-1].argmax())))


if __name__ == "__main__":
    main()
