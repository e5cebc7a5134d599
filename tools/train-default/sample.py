#!/usr/bin/python3
"""Generate text from an exported model.bin with PyTorch (the reference).

Sampling as llama2.c's run.c: logits / temperature, softmax, then top-p
(keep the smallest set of most likely tokens whose mass exceeds top_p,
renormalise) and draw. Temperature 0 is greedy. Stops at EOS or BOS.
"""
import argparse

import torch

from export import read_v0
from tokenizer import BOS, EOS, Tokenizer


@torch.no_grad()
def generate(model, tok, prompt, steps, temperature, top_p, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = [BOS] + tok.encode(prompt)
    n_prompt = len(ids)
    while len(ids) - n_prompt < steps and len(ids) < model.args.max_seq_len:
        logits = model(torch.tensor([ids]))[0, -1]
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            p, order = torch.sort(probs, descending=True)
            keep = int((torch.cumsum(p, 0) <= top_p).sum()) + 1
            p = p[:keep] / p[:keep].sum()
            nxt = int(order[torch.multinomial(p, 1, generator=gen)])
        if nxt in (EOS, BOS):
            break
        ids.append(nxt)
    return tok.decode(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("-n", type=int, default=1, help="number of samples")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = read_v0(args.model)
    tok = Tokenizer.load(args.tokenizer)
    for i in range(args.n):
        print(generate(model, tok, args.prompt, args.steps, args.temperature,
                       args.top_p, args.seed + i))
        print()


if __name__ == "__main__":
    main()
