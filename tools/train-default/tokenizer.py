"""The llama2.c tokenizer.bin format and its encoder, in Python.

File format (little-endian): int32 max_token_length, then for each of the
vocab_size tokens: float32 score, int32 byte length, the piece's bytes.
Pieces hold real spaces (' '), not SentencePiece's U+2581.

encode() is the same algorithm as llama2.c's C encoder (run.c encode()),
which is what the torchlike backend implements:
  1. a dummy-prefix space token if the text is non-empty;
  2. one token per UTF-8 code point, looked up as a piece; a code point that
     is not a piece becomes one byte-fallback token per byte (byte + 3);
  3. repeatedly merge the adjacent pair whose concatenated piece is in the
     vocabulary with the highest score (leftmost pair on ties), until no
     adjacent pair forms a piece.
Step 3 uses a heap instead of run.c's rescan, which picks the same pair each
time: the heap key is (-score, original start of the left token), and the
original start of a token orders tokens left to right.
"""
import heapq
import struct

UNK, BOS, EOS = 0, 1, 2
BYTE_BASE = 3  # <0x00> is id 3, <0xFF> is id 258
N_SPECIAL = 3 + 256


class Tokenizer:
    def __init__(self, pieces, scores):
        if len(pieces) != len(scores):
            raise ValueError("pieces and scores differ in length")
        self.pieces = list(pieces)          # bytes
        self.scores = list(scores)          # floats
        self.lookup = {}
        for i, p in enumerate(self.pieces):
            self.lookup.setdefault(p, i)     # run.c's bsearch finds one id; pieces are unique

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            data = f.read()
        return cls.from_bytes(data, path)

    @classmethod
    def from_bytes(cls, data, name="tokenizer.bin", vocab_size=None):
        pos = 4
        pieces, scores = [], []
        while pos < len(data) and (vocab_size is None or len(pieces) < vocab_size):
            if pos + 8 > len(data):
                raise ValueError("%s: truncated at token %d" % (name, len(pieces)))
            score, n = struct.unpack_from("<fi", data, pos)
            pos += 8
            pieces.append(data[pos:pos + n])
            pos += n
            scores.append(score)
        return cls(pieces, scores)

    def to_bytes(self):
        max_len = max(len(p) for p in self.pieces)
        out = [struct.pack("<i", max_len)]
        for p, s in zip(self.pieces, self.scores):
            out.append(struct.pack("<fi", s, len(p)))
            out.append(p)
        return b"".join(out)

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())

    @property
    def vocab_size(self):
        return len(self.pieces)

    def initial_tokens(self, text):
        """Steps 1 and 2: dummy prefix, then code points with byte fallback."""
        ids = []
        if text:
            ids.append(self.lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8")
            i = self.lookup.get(b)
            if i is not None:
                ids.append(i)
            else:
                ids.extend(BYTE_BASE + x for x in b)
        return ids

    def encode(self, text, bos=False, eos=False):
        ids = self.initial_tokens(text)
        n = len(ids)
        alive = [True] * n
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        tok = ids[:]
        version = [0] * n   # bumped when a slot's token changes
        heap = []

        def push(i):
            j = nxt[i]
            if j >= n:
                return
            m = self.lookup.get(self.pieces[tok[i]] + self.pieces[tok[j]])
            if m is not None:
                heapq.heappush(heap, (-self.scores[m], i, version[i], version[j], j, m))

        for i in range(n - 1):
            push(i)
        while heap:
            _, i, vi, vj, j, m = heapq.heappop(heap)
            if not alive[i] or not alive[j] or nxt[i] != j \
                    or version[i] != vi or version[j] != vj:
                continue
            tok[i] = m
            version[i] += 1
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            if prv[i] >= 0:
                push(prv[i])
            push(i)
        out = [tok[i] for i in range(n) if alive[i]]
        if bos:
            out.insert(0, BOS)
        if eos:
            out.append(EOS)
        return out

    def encode_reference(self, text):
        """run.c's merge loop, literally (quadratic); used to check encode()."""
        ids = self.initial_tokens(text)
        while True:
            best, best_id, best_idx = -1e10, -1, -1
            for k in range(len(ids) - 1):
                m = self.lookup.get(self.pieces[ids[k]] + self.pieces[ids[k + 1]])
                if m is not None and self.scores[m] > best:
                    best, best_id, best_idx = self.scores[m], m, k
            if best_idx == -1:
                return ids
            ids[best_idx:best_idx + 2] = [best_id]

    def decode_piece(self, prev, tok):
        """run.c decode(): strip the leading space after BOS, raw bytes for <0xNN>."""
        p = self.pieces[tok]
        if prev == BOS and p.startswith(b" "):
            p = p[1:]
        if BYTE_BASE <= tok < N_SPECIAL:
            p = bytes([tok - BYTE_BASE])
        return p

    def decode(self, ids):
        out, prev = [], BOS
        for t in ids:
            if t in (BOS, EOS):
                prev = t
                continue
            out.append(self.decode_piece(prev, t))
            prev = t
        return b"".join(out).decode("utf-8", errors="replace")
