"""A small decoder-only transformer (nanoGPT's shape: pre-LayerNorm blocks, learned positions,
tied input/output embeddings) with a slot KV cache for batched decoding."""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    vocab_size: int = 1024
    n_ctx: int = 1024
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.ln1 = nn.LayerNorm(c.d_model)
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.fc = nn.Linear(c.d_model, 4 * c.d_model)
        self.out = nn.Linear(4 * c.d_model, c.d_model)
        self.drop = nn.Dropout(c.dropout)

    def _split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, x, kv=None, mask=None):
        """x: (B, T, D). kv: None (training: causal attention over x) or (k_past, v_past) of shape
        (B, H, P, hd) with mask (B, 1, T, P + T) of allowed positions. Returns x and (k, v) of this
        call's T positions."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if kv is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
                else _attn(q, k, v, torch.ones(t, t, dtype=torch.bool).tril())
        else:
            kk = torch.cat([kv[0], k], dim=2)
            vv = torch.cat([kv[1], v], dim=2)
            y = _attn(q, kk, vv, mask)
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        x = x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))
        return x, (k, v)


def _attn(q, k, v, mask):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.n_ctx, c.d_model)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.d_model)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("proj.weight") or n.endswith("out.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def logits(self, x):
        return self.ln_f(x) @ self.wte.weight.t()

    def forward(self, idx):
        """Training: idx (B, T) -> logits (B, T, V)."""
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x, _ = blk(x)
        return self.logits(x)


class SlotCache:
    """Keys and values of up to n_slots sequences, each in its own slot of a preallocated
    tensor, so a decode step of any subset of slots gathers its past in one index."""

    def __init__(self, model, n_slots):
        c = model.config
        hd = c.d_model // c.n_head
        self.model = model
        self.k = torch.zeros(c.n_layer, n_slots, c.n_head, c.n_ctx, hd)
        self.v = torch.zeros(c.n_layer, n_slots, c.n_head, c.n_ctx, hd)
        self.length = [0] * n_slots

    @torch.no_grad()
    def prefill(self, slot, ids):
        """Runs the prompt ids of a fresh sequence in slot; returns the last position's logits."""
        m = self.model
        t = len(ids)
        idx = torch.tensor([ids], dtype=torch.long)
        x = m.wte(idx) + m.wpe(torch.arange(t))
        for li, blk in enumerate(m.blocks):
            x, (k, v) = blk(x)
            self.k[li, slot, :, :t] = k[0]
            self.v[li, slot, :, :t] = v[0]
        self.length[slot] = t
        return m.logits(x[:, -1])[0]

    @torch.no_grad()
    def decode(self, slots, tokens):
        """One token for each of slots (a list): appends it and returns logits (B, V)."""
        m = self.model
        b = len(slots)
        lens = torch.tensor([self.length[s] for s in slots])
        p = int(lens.max())
        sidx = torch.tensor(slots)
        x = m.wte(torch.tensor(tokens).view(b, 1)) + m.wpe(lens).view(b, 1, -1)
        mask = torch.ones(b, 1, 1, p + 1, dtype=torch.bool)
        mask[:, 0, 0, :p] = torch.arange(p).view(1, p) < lens.view(b, 1)
        for li, blk in enumerate(m.blocks):
            kp = self.k[li, sidx, :, :p]
            vp = self.v[li, sidx, :, :p]
            x, (k, v) = blk(x, (kp, vp), mask)
            self.k[li, sidx, :, lens] = k[:, :, 0]
            self.v[li, sidx, :, lens] = v[:, :, 0]
        for s in slots:
            self.length[s] += 1
        return m.logits(x[:, 0])
