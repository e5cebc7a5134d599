#!/usr/bin/env python3
"""Write a llama-architecture GGUF with seeded random fp32 weights, for
bench/gguf (speed only: the weights mean nothing).

    make_model.py OUT.gguf [--dim 768 --hidden 2048 --layers 12 --heads 12
                            --kv-heads HEADS --vocab 32000 --ctx 1024 --seed 1]

Needs numpy and llama.cpp's gguf-py package on PYTHONPATH. The vocabulary is
a SentencePiece-style one ("llama" tokenizer: <unk> <s> </s>, 256 byte
tokens, then made-up pieces) so both llama.cpp and torchlike load the file.
"""
import argparse

import numpy as np
import gguf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    for name, default in [("dim", 768), ("hidden", 2048), ("layers", 12), ("heads", 12),
                          ("kv-heads", 0), ("vocab", 32000), ("ctx", 1024), ("seed", 1)]:
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("bench-random")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.dim)
    w.add_feed_forward_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(a.dim // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)  # all F32

    tokens, scores, types = [b"<unk>", b"<s>", b"</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(("<0x%02X>" % b).encode())
        scores.append(0.0)
        types.append(6)
    i = 0
    while len(tokens) < a.vocab:
        tokens.append(("\u2581p%d" % i).encode())
        scores.append(-float(i))
        types.append(1)
        i += 1
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)

    kv = a.dim * a.kv_heads // a.heads
    w.add_tensor("token_embd.weight", mat(a.vocab, a.dim))
    for l in range(a.layers):
        p = "blk.%d." % l
        w.add_tensor(p + "attn_norm.weight", np.ones(a.dim, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(a.dim, a.dim))
        w.add_tensor(p + "attn_k.weight", mat(kv, a.dim))
        w.add_tensor(p + "attn_v.weight", mat(kv, a.dim))
        w.add_tensor(p + "attn_output.weight", mat(a.dim, a.dim))
        w.add_tensor(p + "ffn_norm.weight", np.ones(a.dim, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(a.hidden, a.dim))
        w.add_tensor(p + "ffn_down.weight", mat(a.dim, a.hidden))
        w.add_tensor(p + "ffn_up.weight", mat(a.hidden, a.dim))
    w.add_tensor("output_norm.weight", np.ones(a.dim, dtype=np.float32))
    w.add_tensor("output.weight", mat(a.vocab, a.dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
