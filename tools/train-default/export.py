#!/usr/bin/python3
"""Export a trained checkpoint to the llama2.c v0 ("legacy") model.bin.

Layout, as llama2.c's export.py legacy_export() writes it and run.c's
memory_map_weights() reads it (all little-endian):
  7 x int32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
              seq_len   (vocab_size > 0: the classifier is the embedding)
  fp32        token_embedding[vocab, dim]
              rms_att[layer][dim], wq[layer][dim, dim], wk[layer][kv_dim, dim],
              wv[layer][kv_dim, dim], wo[layer][dim, dim], rms_ffn[layer][dim],
              w1[layer][hidden, dim], w2[layer][dim, hidden],
              w3[layer][hidden, dim], rms_final[dim],
              freq_cis_real[seq_len, head_size/2], freq_cis_imag[same]
The two RoPE tables are the old format's precomputed cos/sin; run.c skips
them (it recomputes RoPE) but they are in the file, so they are written.
"""
import argparse
import struct

import torch

from model import ModelArgs, Transformer


def load_model(ckpt_path):
    ck = torch.load(ckpt_path, map_location="cpu")
    model = Transformer(ModelArgs(**ck["args"]))
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck


def write_v0(model, path):
    a = model.args
    layers = model.layers

    def w(t):
        f.write(t.detach().contiguous().to(torch.float32).numpy().tobytes())

    with open(path, "wb") as f:
        f.write(struct.pack("<7i", a.dim, a.hidden_dim, a.n_layers, a.n_heads,
                            a.n_kv_heads, a.vocab_size, a.max_seq_len))
        w(model.tok_embeddings.weight)
        for name in ("attention_norm", "attention.wq", "attention.wk", "attention.wv",
                     "attention.wo", "ffn_norm", "feed_forward.w1",
                     "feed_forward.w2", "feed_forward.w3"):
            for layer in layers:
                mod = layer
                for part in name.split("."):
                    mod = getattr(mod, part)
                w(mod.weight)
        w(model.norm.weight)
        w(model.freqs_cos[:a.max_seq_len])
        w(model.freqs_sin[:a.max_seq_len])


def read_v0(path):
    """Load a v0 model.bin (shared classifier) back into a Transformer."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack_from("<7i", data)
    if vocab <= 0:
        raise ValueError("%s: separate classifier (vocab_size %d) not supported" % (path, vocab))
    a = ModelArgs(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                  vocab_size=vocab, hidden_dim=hidden, max_seq_len=seq)
    model = Transformer(a)
    floats = np.frombuffer(data, dtype="<f4", offset=28)
    pos = 0

    def take(shape):
        nonlocal pos
        n = int(np.prod(shape))
        t = torch.from_numpy(floats[pos:pos + n].copy()).view(*shape)
        pos += n
        return t

    kv_dim = dim * n_kv // n_heads
    shapes = {"attention_norm": (dim,), "attention.wq": (dim, dim),
              "attention.wk": (kv_dim, dim), "attention.wv": (kv_dim, dim),
              "attention.wo": (dim, dim), "ffn_norm": (dim,),
              "feed_forward.w1": (hidden, dim), "feed_forward.w2": (dim, hidden),
              "feed_forward.w3": (hidden, dim)}
    with torch.no_grad():
        model.tok_embeddings.weight.copy_(take((vocab, dim)))
        for name, shape in shapes.items():
            for layer in model.layers:
                mod = layer
                for part in name.split("."):
                    mod = getattr(mod, part)
                mod.weight.copy_(take(shape))
        model.norm.weight.copy_(take((dim,)))
    head = dim // n_heads
    expect = pos + 2 * seq * head // 2
    if expect != len(floats):
        raise ValueError("%s: %d floats, expected %d" % (path, len(floats), expect))
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model, _ = load_model(args.ckpt)
    write_v0(model, args.out)
    print("exported %s" % args.out)


if __name__ == "__main__":
    main()
