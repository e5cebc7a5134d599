#!/usr/bin/python3
"""torchlike's tokenizer against SentencePiece itself.

The committed tokenizers are llama2.c tokenizer.bin files: pieces and
scores, not SentencePiece .model files. This script writes the very same
vocabulary as a SentencePiece ModelProto (BPE, byte fallback, the identity
normaliser with the dummy prefix and no whitespace folding: the settings
tokenizer.bin's BPE stands for), loads it into Debian's python3-sentencepiece
and lets SentencePiece's own encoder produce the reference ids for:

  - every piece of the vocabulary (as text, and without its leading space),
  - pairs of pieces, the longest pieces with their neighbours,
  - text that needs byte fallback (code points outside the vocabulary),
  - whitespace runs (spaces, tabs, newlines, mixed, leading and trailing).

The pairs (text, ids) go to a TSV file that tokenizer_oracle_check (C,
torchlike's tokenizer) encodes and compares line by line.

Usage: tokenizer_oracle.py TOKENIZER_BIN CHECKER SCRATCH_DIR
Only this test uses SentencePiece; the product never does.
"""
import os
import random
import struct
import subprocess
import sys

try:
    import sentencepiece as spm
except ImportError:
    sys.exit("tokenizer_oracle: the reference, Debian's python3-sentencepiece, is not "
             "installed for /usr/bin/python3 (scripts/install-deps.sh --test installs it)")


def read_tokenizer_bin(path):
    data = open(path, "rb").read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    off, pieces = 4, []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append((data[off:off + n], score))
        off += n
    return max_len, pieces


# --- protobuf wire format, the few fields a ModelProto needs -------------------
def varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    return varint((num << 3) | 2) + varint(len(b)) + b


def field_float(num, f):
    return varint((num << 3) | 5) + struct.pack("<f", f)


NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def piece_type(i, raw):
    if i == 0:
        return UNKNOWN
    if i in (1, 2):
        return CONTROL
    if len(raw) == 6 and raw.startswith(b"<0x") and raw.endswith(b">"):
        return BYTE
    return NORMAL


def model_proto(pieces):
    out = bytearray()
    for i, (raw, score) in enumerate(pieces):
        text = raw.decode("utf-8").replace(" ", "\u2581")
        sp = (field_bytes(1, text.encode("utf-8")) + field_float(2, score)
              + field_varint(3, piece_type(i, raw)))
        out += field_bytes(1, sp)
    # TrainerSpec: model_type BPE (3 = 2), vocab_size (4), unk/bos/eos/pad ids
    # (40..43), byte_fallback (35).
    trainer = (field_varint(3, 2) + field_varint(4, len(pieces)) + field_varint(35, 1)
               + field_varint(40, 0) + field_varint(41, 1) + field_varint(42, 2)
               + field_varint(43, -1))
    # NormalizerSpec: name (1), add_dummy_prefix (3), remove_extra_whitespaces
    # (4), escape_whitespaces (5).
    normalizer = (field_bytes(1, b"identity") + field_varint(3, 1) + field_varint(4, 0)
                  + field_varint(5, 1))
    out += field_bytes(2, trainer) + field_bytes(3, normalizer)
    return bytes(out)


def corpus(pieces, max_len):
    rng = random.Random(31)
    normal = [raw.decode("utf-8") for i, (raw, _) in enumerate(pieces)
              if piece_type(i, raw) == NORMAL]
    texts = []
    for p in normal:  # every piece, alone
        texts.append(p)
        if p.startswith(" ") and len(p) > 1:
            texts.append(p[1:])
    for _ in range(len(normal)):  # pairs and triples of pieces
        texts.append("".join(rng.choice(normal) for _ in range(rng.randint(2, 3))))
    by_len = sorted(normal, key=lambda p: -len(p.encode("utf-8")))
    longest = [p for p in by_len if len(p.encode("utf-8")) == max_len]
    if not longest:
        sys.exit("tokenizer_oracle: no piece is max_token_length (%d) bytes long" % max_len)
    for p in by_len[:40]:  # the longest pieces, with neighbours on either side
        core = p.lstrip(" ")
        for q in by_len[:8] + normal[:8]:
            texts += [p + q, q + p, core + core, core + "s", "x" + core, core + " " + core,
                      "  " + core, core + "  "]
    # byte fallback: code points the vocabulary lacks, control bytes, emoji
    fallback = ["\u65e5\u672c\u8a9e", "\U0001F600 smile", "a\u0001b", "\u007f", "tab\there",
                "\u00e9t\u00e9", "\u0416\u0438\u0437\u043d\u044c", "\U00010348",
                "mixed \u4e2d\u6587 and ascii", "\u200b zero width", "\ufeffbom"]
    texts += fallback + [f + " " + rng.choice(normal) for f in fallback]
    # whitespace runs
    for n in range(1, 17):
        texts += [" " * n, "a" + " " * n + "b", " " * n + "word", "word" + " " * n,
                  "\t" * n, "\n" * n, (" \t\n" * n)[:n]]
    texts += ["\r\n\r\n", " \n \n", "line one\nline two\n", "  leading", "trailing  "]
    seen, out = set(), []
    for t in texts:
        if t and t not in seen and "\0" not in t:
            seen.add(t)
            out.append(t)
    return out, longest


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: tokenizer_oracle.py TOKENIZER_BIN CHECKER SCRATCH_DIR")
    tok_path, checker, scratch = sys.argv[1:]
    max_len, pieces = read_tokenizer_bin(tok_path)
    sp = spm.SentencePieceProcessor()
    if not sp.LoadFromSerializedProto(model_proto(pieces)):
        sys.exit("tokenizer_oracle: SentencePiece refused the model made from " + tok_path)
    if sp.get_piece_size() != len(pieces):
        sys.exit("tokenizer_oracle: SentencePiece sees %d pieces, the file has %d"
                 % (sp.get_piece_size(), len(pieces)))
    texts, longest = corpus(pieces, max_len)
    os.makedirs(scratch, exist_ok=True)
    tsv = os.path.join(scratch, os.path.basename(tok_path) + ".oracle.tsv")
    single = 0
    with open(tsv, "w") as f:
        for t in texts:
            ids = sp.encode(t)
            single += len(ids) == 1
            f.write(t.encode("utf-8").hex() + "\t" + " ".join(map(str, ids)) + "\n")
    print("tokenizer_oracle: %s: %d pieces (max_token_length %d, %d that long: %s), "
          "%d texts, %d encoded by SentencePiece as one piece"
          % (tok_path, len(pieces), max_len, len(longest), ", ".join(repr(p) for p in longest[:3]),
             len(texts), single))
    sys.stdout.flush()
    rc = subprocess.call([checker, tok_path, str(len(pieces)), tsv])
    sys.exit(rc)


main()
