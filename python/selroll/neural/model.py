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
    """Keys and values of up to n_slots sequences in preallocated tensors. The running sequences
    always hold slots 0..n-1 (a finished one's slot gets the last sequence's cache), so a decode
    step attends over a view of the first n slots: no gather, no copy of the past."""

    def __init__(self, model, n_slots):
        c = model.config
        hd = c.d_model // c.n_head
        self.model = model
        self.n_slots = n_slots
        self.k = torch.zeros(c.n_layer, n_slots, c.n_head, c.n_ctx, hd)
        self.v = torch.zeros(c.n_layer, n_slots, c.n_head, c.n_ctx, hd)
        self.length = [0] * n_slots
        self.owner = [None] * n_slots
        self.n = 0

    def full(self):
        return self.n >= self.n_slots

    @torch.no_grad()
    def add(self, owner, ids):
        """Prefills ids as a new sequence in slot n (owner.slot is set and kept up to date);
        returns the last position's logits."""
        slot = self.n
        self.n += 1
        self.owner[slot] = owner
        owner.slot = slot
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
    def add_many(self, owners, id_lists):
        """Prefills several new sequences in one padded forward pass (right padding: under the
        causal mask a real position never sees a pad); returns their last positions' logits."""
        m = self.model
        b = len(owners)
        lens = [len(x) for x in id_lists]
        t = max(lens)
        idx = torch.zeros(b, t, dtype=torch.long)
        for i, ids in enumerate(id_lists):
            idx[i, :lens[i]] = torch.tensor(ids, dtype=torch.long)
        slots = []
        for o in owners:
            slot = self.n
            self.n += 1
            self.owner[slot] = o
            o.slot = slot
            slots.append(slot)
        x = m.wte(idx) + m.wpe(torch.arange(t))
        for li, blk in enumerate(m.blocks):
            x, (k, v) = blk(x)
            for i, slot in enumerate(slots):
                self.k[li, slot, :, :lens[i]] = k[i, :, :lens[i]]
                self.v[li, slot, :, :lens[i]] = v[i, :, :lens[i]]
        for i, slot in enumerate(slots):
            self.length[slot] = lens[i]
        last = x[torch.arange(b), torch.tensor(lens) - 1]
        return m.logits(last)

    def remove(self, owner):
        """Frees owner's slot: the last sequence moves into it."""
        s, last = owner.slot, self.n - 1
        if s < 0 or s > last or self.owner[s] is not owner:
            raise ValueError("not a running sequence")
        if s != last:
            n = self.length[last]
            self.k[:, s, :, :n] = self.k[:, last, :, :n]
            self.v[:, s, :, :n] = self.v[:, last, :, :n]
            self.length[s] = n
            self.owner[s] = self.owner[last]
            self.owner[s].slot = s
        self.owner[last] = None
        self.length[last] = 0
        owner.slot = -1
        self.n -= 1

    @torch.no_grad()
    def decode(self, tokens):
        """One token for each running sequence (tokens[i] for slot i): appends it and returns the
        logits (n, V)."""
        m = self.model
        b = self.n
        lens = torch.tensor(self.length[:b])
        p = int(lens.max()) + 1
        rows = torch.arange(b)
        x = m.wte(torch.tensor(tokens).view(b, 1)) + m.wpe(lens).view(b, 1, -1)
        mask = (torch.arange(p).view(1, p) <= lens.view(b, 1)).view(b, 1, 1, p)
        for li, blk in enumerate(m.blocks):
            d = x.shape[-1]
            q, k, v = blk.qkv(blk.ln1(x)).split(d, dim=2)
            q, k, v = blk._split(q), blk._split(k), blk._split(v)
            self.k[li, rows, :, lens] = k[:, :, 0]
            self.v[li, rows, :, lens] = v[:, :, 0]
            y = _attn(q, self.k[li, :b, :, :p], self.v[li, :b, :, :p], mask)
            y = y.transpose(1, 2).reshape(b, 1, d)
            x = x + blk.proj(y)
            x = x + blk.out(F.gelu(blk.fc(blk.ln2(x))))
        for i in range(b):
            self.length[i] += 1
        return m.logits(x[:, 0])
