"""The checkpoint: one torch file with the model config, weights, tokenizer and how it was made."""
import dataclasses
import os

import torch

from .model import GPT, Config
from .tokenizer import Tokenizer


def save(path, model, tok, info, extra=None):
    d = {"config": dataclasses.asdict(model.config),
         "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
         "tokenizer": tok.to_json(), "info": info}
    if extra:
        d.update(extra)
    tmp = path + ".tmp"
    torch.save(d, tmp)
    os.replace(tmp, path)


def load(path, with_extra=False):
    d = torch.load(path, map_location="cpu")
    cfg = Config(**d["config"])
    model = GPT(cfg)
    model.load_state_dict(d["model"])
    model.eval()
    tok = Tokenizer.from_json(d["tokenizer"])
    if with_extra:
        return model, tok, d.get("info", {}), d
    return model, tok, d.get("info", {})
