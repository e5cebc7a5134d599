#!/usr/bin/python3
"""Independent reference logits for torchlike's forward pass.

Reads a llama2.c checkpoint with numpy (float64 arithmetic, a direct
transcription of the Llama equations — no code shared with torchlike) and
writes the logits of every position of a fixed token sequence as float32.

Made once and committed (data/tiny-logits.f32); regenerate with:
  build/plugins/torchlike/torchlike_make_random_model tests/torchlike/data/tiny-model.bin \
      tests/torchlike/data/tiny-tokenizer.bin 48 96 2 4 2 384 64 7 separate
  /usr/bin/python3 tests/torchlike/make_forward_fixture.py tests/torchlike/data/tiny-model.bin \
      tests/torchlike/data/tiny-logits.f32
(the executable's path depends on the build directory; the test checks that
the build still writes a byte-identical tiny-model.bin.)
"""
import sys

import numpy as np

TOKENS = [1, 300, 17, 5, 383, 42, 42, 260, 99, 2, 354, 120, 7, 64, 311, 200, 3, 77, 150, 250]


def load(path):
    raw = open(path, "rb").read()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = np.frombuffer(raw[:28], dtype=np.int32)
    shared = vocab > 0
    vocab = abs(int(vocab))
    f = np.frombuffer(raw[28:], dtype=np.float32).astype(np.float64)
    head = dim // heads
    kv_dim = dim * kv_heads // heads
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        out = f[at:at + n].reshape(shape)
        at += n
        return out

    w = {}
    w["emb"] = take(vocab, dim)
    w["rms_att"] = take(layers, dim)
    w["wq"] = take(layers, dim, dim)
    w["wk"] = take(layers, kv_dim, dim)
    w["wv"] = take(layers, kv_dim, dim)
    w["wo"] = take(layers, dim, dim)
    w["rms_ffn"] = take(layers, dim)
    w["w1"] = take(layers, hidden, dim)
    w["w2"] = take(layers, dim, hidden)
    w["w3"] = take(layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, head)  # legacy RoPE table
    w["wcls"] = w["emb"] if shared else take(vocab, dim)
    assert at == f.size, "file size does not match the header"
    cfg = dict(dim=int(dim), hidden=int(hidden), layers=int(layers), heads=int(heads),
               kv_heads=int(kv_heads), vocab=vocab, head=int(head))
    return cfg, w


def rmsnorm(x, g):
    return g * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)


def rope(x, head):
    """x: [T, n_heads, head]; rotate pairs (2i, 2i+1) by pos * 10000^(-2i/head)."""
    T = x.shape[0]
    pos = np.arange(T)[:, None]
    freq = 1.0 / (10000.0 ** (np.arange(0, head, 2) / head))
    ang = pos * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def forward(cfg, w, tokens):
    T, H, KV, hs = len(tokens), cfg["heads"], cfg["kv_heads"], cfg["head"]
    x = w["emb"][tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["layers"]):
        h = rmsnorm(x, w["rms_att"][l])
        q = rope((h @ w["wq"][l].T).reshape(T, H, hs), hs)
        k = rope((h @ w["wk"][l].T).reshape(T, KV, hs), hs)
        v = (h @ w["wv"][l].T).reshape(T, KV, hs)
        k = np.repeat(k, H // KV, axis=1)
        v = np.repeat(v, H // KV, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hs) + mask
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, -1)
        x = x + o @ w["wo"][l].T
        h = rmsnorm(x, w["rms_ffn"][l])
        a = h @ w["w1"][l].T
        x = x + ((a / (1 + np.exp(-a))) * (h @ w["w3"][l].T)) @ w["w2"][l].T
    return rmsnorm(x, w["rms_final"]) @ w["wcls"].T


def main():
    cfg, w = load(sys.argv[1])
    logits = forward(cfg, w, TOKENS)
    logits.astype(np.float32).tofile(sys.argv[2])
    print("wrote", logits.shape, "argmax", logits.argmax(axis=-1).tolist())


if __name__ == "__main__":
    main()
