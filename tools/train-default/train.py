#!/usr/bin/python3
"""Train the default model on the Austen corpus, capped by wall-clock time.

Each paragraph becomes BOS + encode(paragraph) + EOS; the paragraphs are
concatenated into one token stream, and training windows of seq_len + 1
tokens are cut at random offsets (llama2.c style). The learning rate warms up
linearly, then follows a cosine to lr/10 over the time budget, so a slower
machine trains fewer steps but still anneals. One thread: on a shared
two-core machine one process per core is faster than two threads.

Writes <work>/ckpt.pt (model state + args + losses) after every evaluation.
"""
import argparse
import json
import math
import os
import time

# OpenBLAS (Debian's torch uses it) starts its own thread pool, which
# torch.set_num_threads() does not limit; pin it before torch loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from model import ModelArgs, Transformer
from tokenizer import BOS, EOS, Tokenizer


def tokenize_file(tok, txt, cache):
    if os.path.exists(cache) and os.path.getmtime(cache) > max(
            os.path.getmtime(txt), os.path.getmtime(tok.path)):
        return np.load(cache)
    ids = []
    with open(txt, encoding="utf-8") as f:
        for line in f:
            p = line.rstrip("\n")
            if p:
                ids.append(BOS)
                ids.extend(tok.encode(p))
                ids.append(EOS)
    arr = np.array(ids, dtype=np.int16 if tok.vocab_size < 32768 else np.int32)
    np.save(cache, arr)
    return arr


@torch.no_grad()
def evaluate(model, data, seq_len, max_windows=None):
    """Mean loss over non-overlapping windows of the validation stream."""
    model.eval()
    n = (len(data) - 1) // seq_len
    if max_windows:
        n = min(n, max_windows)
    total, count = 0.0, 0
    for start in range(0, n, 16):
        idx = range(start, min(n, start + 16))
        x = torch.stack([data[i * seq_len:(i + 1) * seq_len] for i in idx])
        y = torch.stack([data[i * seq_len + 1:(i + 1) * seq_len + 1] for i in idx])
        _, loss = model(x, y)
        total += loss.item() * len(idx)
        count += len(idx)
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget")
    ap.add_argument("--steps", type=int, default=0,
                    help="cap by optimizer steps instead of time (the cosine "
                         "then runs over steps; for machine-independent reruns)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = Tokenizer.load(os.path.join(args.work, "tokenizer.bin"))
    tok.path = os.path.join(args.work, "tokenizer.bin")
    margs = ModelArgs(vocab_size=tok.vocab_size)
    t0 = time.time()
    train = torch.from_numpy(tokenize_file(
        tok, os.path.join(args.work, "train.txt"),
        os.path.join(args.work, "train_ids.npy")).astype(np.int64))
    val = torch.from_numpy(tokenize_file(
        tok, os.path.join(args.work, "val.txt"),
        os.path.join(args.work, "val_ids.npy")).astype(np.int64))
    print("data: %d train tokens, %d val tokens (tokenized in %.0f s)"
          % (len(train), len(val), time.time() - t0), flush=True)

    model = Transformer(margs)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    seq = margs.max_seq_len
    budget = args.minutes * 60.0
    history = []
    start = time.time()
    step = 0

    def save(final_val=None):
        torch.save({"model": model.state_dict(), "args": margs.__dict__,
                    "step": step, "history": history, "final_val": final_val,
                    "train_args": vars(args)},
                   os.path.join(args.work, "ckpt.pt"))

    while True:
        elapsed = time.time() - start
        if args.steps:
            frac = min(1.0, step / args.steps)
        else:
            frac = min(1.0, elapsed / budget)
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(train) - seq - 1, (args.batch,), generator=gen)
        x = torch.stack([train[i:i + seq] for i in ix])
        y = torch.stack([train[i + 1:i + seq + 1] for i in ix])
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        done = step >= args.steps if args.steps else elapsed >= budget
        if step % args.eval_every == 0 or done:
            v = evaluate(model, val, seq, max_windows=64)
            history.append({"step": step, "minutes": round(elapsed / 60, 2),
                            "train_loss": round(loss.item(), 4), "val_loss": round(v, 4),
                            "lr": lr})
            print(json.dumps(history[-1]), flush=True)
            save()
        if done:
            break

    final = evaluate(model, val, seq)
    train_est = evaluate(model, train[:len(val)], seq)
    save(final_val=final)
    print("final: step %d, %.1f min, val loss %.4f (all %d val tokens), "
          "train loss %.4f (first %d train tokens)"
          % (step, (time.time() - start) / 60, final, len(val), train_est, len(val)),
          flush=True)


if __name__ == "__main__":
    main()
