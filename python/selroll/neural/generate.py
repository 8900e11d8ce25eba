"""Sampling from the model: greedy or temperature / top-p, with a per-request seeded generator."""
import torch


def pick(logits, temperature, top_p, gen):
    """Returns (token id, its logprob under the model's distribution at temperature 1)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    if temperature is None or temperature <= 0:
        t = int(torch.argmax(logits))
        return t, float(logp[t])
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p is not None and top_p < 1.0:
        sp, si = torch.sort(probs, descending=True)
        keep = torch.cumsum(sp, 0) - sp < top_p
        keep[0] = True
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[si[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    t = int(torch.multinomial(probs, 1, generator=gen))
    return t, float(logp[t])
