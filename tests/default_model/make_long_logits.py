#!/usr/bin/python3
"""Reference logits of the default model over its whole context window.

logits_expected.bin (tools/train-default/make_fixtures.py) covers 40
positions, so an attention that only looked at the last few dozen positions,
a RoPE table wrong past some position, or a KV-cache page boundary error
further in would pass it. This fixture fills the model's whole context
(seq_len positions) and keeps the logits of a spread of positions, including
either side of every 16-position KV page boundary in the second half.

Tokens: BOS, then the ids of the held-out paragraphs in encode_expected.txt
(the training pipeline's own encoding) one after another, cut at seq_len.
Logits: the numpy float64 transcription of the Llama equations in
tests/torchlike/make_forward_fixture.py (no code shared with torchlike),
stored as float32.

Layout (little-endian): char[4] "ILGT", int32 version 2, int32 n_tokens,
int32 vocab_size, int32 n_rows, int32 tokens[n_tokens], int32 positions[n_rows],
float32 logits[n_rows][vocab_size] (row r = the logits after tokens[0..positions[r]]).

Made once and committed; regenerate (offline, numpy only) with:
  /usr/bin/python3 tests/default_model/make_long_logits.py \
      plugins/torchlike/default/model.bin tests/default_model/encode_expected.txt \
      tests/default_model/logits_long_expected.bin
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torchlike"))
from make_forward_fixture import forward, load  # noqa: E402

BOS = 1


def read_ids(path):
    ids = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("I "):
                ids.extend(int(v) for v in line.split()[1:])
    return ids


def positions(n):
    keep = {0, 1, 15, 16, 17, 31, 32, 38, 39, 40, 41, 47, 48, 63, 64, 65, 100, 127, 128, 129}
    keep |= {p for p in range(n // 2, n) if p % 16 in (15, 0)}
    keep.add(n - 1)
    return sorted(p for p in keep if p < n)


def main():
    model, encoded, out = sys.argv[1:4]
    raw = open(model, "rb").read(28)
    seq_len = struct.unpack("<7i", raw)[6]
    cfg, w = load(model)
    tokens = ([BOS] + read_ids(encoded))[:seq_len]
    assert len(tokens) == seq_len, "encode_expected.txt has fewer than seq_len ids"
    logits = forward(cfg, w, tokens)
    rows = positions(len(tokens))
    with open(out, "wb") as f:
        f.write(b"ILGT" + struct.pack("<4i", 2, len(tokens), cfg["vocab"], len(rows)))
        f.write(struct.pack("<%di" % len(tokens), *tokens))
        f.write(struct.pack("<%di" % len(rows), *rows))
        f.write(logits[rows].astype("<f4").tobytes())
    print("wrote %d tokens, %d rows, argmax at the last position %d"
          % (len(tokens), len(rows), int(logits[-1].argmax())))


if __name__ == "__main__":
    main()
