"""Llama-architecture transformer, as in llama2.c's model.py.

RMSNorm (eps 1e-5), rotary embeddings on interleaved (even, odd) pairs as
run.c applies them, multi-head attention with n_kv_heads (grouped-query when
fewer than n_heads), SwiGLU feed-forward w2(silu(w1 x) * w3 x), and the
classifier tied to the token embedding. No dropout, no biases.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 4
    vocab_size: int = 1024
    hidden_dim: int = 352
    max_seq_len: int = 256
    norm_eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs(head_dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(end).float()
    freqs = torch.outer(t, freqs)
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary(x, cos, sin):
    # x: (batch, seq, heads, head_dim); pairs are (x[2i], x[2i+1]).
    xr, xi = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    out_r = xr * cos - xi * sin
    out_i = xr * sin + xi * cos
    return torch.stack([out_r, out_i], dim=-1).flatten(3)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads = a.n_heads
        self.n_kv_heads = a.n_kv_heads
        self.head_dim = a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        rep = self.n_heads // self.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(2, 3)) / math.sqrt(self.head_dim)
        att = att + mask[:, :, :t, :t]
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, -1)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.w1 = nn.Linear(a.dim, a.hidden_dim, bias=False)
        self.w2 = nn.Linear(a.hidden_dim, a.dim, bias=False)
        self.w3 = nn.Linear(a.dim, a.hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attention = Attention(a)
        self.feed_forward = FeedForward(a)
        self.attention_norm = RMSNorm(a.dim, a.norm_eps)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        self.output.weight = self.tok_embeddings.weight  # tied classifier
        cos, sin = precompute_freqs(a.dim // a.n_heads, a.max_seq_len)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        mask = torch.full((1, 1, a.max_seq_len, a.max_seq_len), float("-inf"))
        self.register_buffer("mask", torch.triu(mask, diagonal=1), persistent=False)
        self.apply(self._init_weights)
        # GPT-2 style scaled init of the residual projections, as llama2.c.
        for name, p in self.named_parameters():
            if name.endswith("w3.weight") or name.endswith("wo.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * a.n_layers))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, tokens, targets=None):
        t = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:t], self.freqs_sin[:t]
        for layer in self.layers:
            h = layer(h, cos, sin, self.mask)
        logits = self.output(self.norm(h))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
