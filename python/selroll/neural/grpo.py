"""The neural agent's GRPO trainer (python3 -m selroll.neural train --pull EP --ack EP --weights-dir DIR).

It is an external trainer on selroll's trainer channel (docs/protocol.md; selroll.Trainer): for each
BATCH it takes every step's exact token ids (the completion ids the server sampled, `token_ids`,
and their old logprobs, `token_logprobs`; the prompt ids from `--tokens full`, else rebuilt from
the step's `messages` through the server's own chat rendering and tokenizer, prompt.chat_text and
the checkpoint's Tokenizer), lays them out with selroll.to_tensors (loss mask on the completion
tokens), and runs PPO-clip on the advantages selroll computed (advantages x weight, the audit
weight in them): ratio = exp(new logprob - old logprob), loss = -mean over completion tokens of
min(ratio A, clip(ratio, 1 - eps, 1 + eps) A), no KL term, AdamW, --passes passes over the batch in
minibatches of --minibatch sequences. It saves the new weights (the checkpoint format the server
loads) as DIR/v<version>.pt and acks WEIGHTS_READY with that path. A batch whose ids are not this
tokenizer's (an id outside the vocabulary, completion ids that do not decode to the step's raw
text, prompt ids that are not the rendering of the step's messages) is refused with the reason.

On each batch's first minibatch (before any update of that batch) it logs the mean |ratio - 1| over
the completion tokens: about 0 (float rounding, < 1e-3) when the served weights are the trained
ones and the ids are exact.
"""
import argparse
import array
import copy
import json
import math
import os
import sys
import time

import torch

from .. import trainer as trainer_mod
from . import checkpoint, prompt

DEFAULT_WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights", "household.pt")


class Refused(Exception):
    """The batch cannot be trained token-exactly; str(e) is the reason."""


def _ids_ok(ids, vocab):
    for x in ids:
        if x < 0 or x >= vocab:
            return x
    return None


def prepare(batch, tok, n_ctx):
    """Checks every step's ids against the tokenizer and fills each step's prompt ids (rebuilt from
    its messages when the BATCH has completion ids only), then returns selroll.to_tensors(batch).
    Raises Refused naming the first bad step."""
    vocab = tok.vocab_size
    for gi, g in enumerate(batch.groups):
        for ti, t in enumerate(g.trajectories):
            full = t.prompts()
            for k, s in enumerate(t.steps):
                where = "group %d (%s) trajectory %d step %d" % (gi, g.group, ti, s.i)
                if s.token_ids is None or s.token_logprobs is None:
                    raise Refused("%s has no token ids (run the actors with --tokens completion or full)" % where)
                if len(s.token_ids) != len(s.token_logprobs):
                    raise Refused("%s: %d ids but %d logprobs" % (where, len(s.token_ids), len(s.token_logprobs)))
                bad = _ids_ok(s.token_ids, vocab)
                if bad is not None:
                    raise Refused("%s: completion token id %d is not this tokenizer's (vocabulary %d)"
                                  % (where, bad, vocab))
                if not all(math.isfinite(x) and x <= 1e-3 for x in s.token_logprobs):
                    raise Refused("%s: a token logprob is not a finite log-probability" % where)
                if not s.extra.get("text_truncated") and not s.reasoning:
                    # the actor keeps text as C strings: a NUL byte ends its copy
                    text = tok.decode(list(s.token_ids))
                    if text != s.raw and text.split("\x00")[0] != s.raw:
                        raise Refused("%s: the completion ids decode to %r, not the step's raw text %r"
                                      % (where, text[:60], s.raw[:60]))
                rebuilt = None
                if s.messages:
                    try:
                        rebuilt = tok.encode(prompt.chat_text(s.messages))
                    except (KeyError, TypeError) as e:
                        raise Refused("%s: messages are not role/content maps (%s)" % (where, e)) from None
                if full[k] is not None:
                    bad = _ids_ok(full[k], vocab)
                    if bad is not None:
                        raise Refused("%s: prompt token id %d is not this tokenizer's (vocabulary %d)"
                                      % (where, bad, vocab))
                    if rebuilt is not None and list(full[k]) != rebuilt:
                        raise Refused("%s: the prompt ids are not this tokenizer's ids of the step's messages" % where)
                    ids = list(full[k])
                elif rebuilt is not None:
                    ids = rebuilt
                else:
                    raise Refused("%s has neither prompt ids nor messages (run the actors with "
                                  "--record-messages or --tokens full)" % where)
                if len(ids) + len(s.token_ids) > n_ctx:
                    raise Refused("%s: %d prompt + %d completion tokens exceed the model's context %d"
                                  % (where, len(ids), len(s.token_ids), n_ctx))
                s.prompt_token_ids = array.array("i", ids)
            # every step as its own sequence: the prompt rendered whole (history inside), the
            # prompt_prefix of --tokens full already applied above
            for s in t.steps:
                s.prompt_prefix = None
    try:
        return trainer_mod.to_tensors(batch)
    except ValueError as e:
        raise Refused(str(e)) from None


def _minibatch_tensors(seqs):
    n = max(len(s.input_ids) for s in seqs)
    B = len(seqs)
    ids = torch.zeros((B, n), dtype=torch.long)
    mask = torch.zeros((B, n), dtype=torch.float32)
    old = torch.zeros((B, n), dtype=torch.float32)
    adv = torch.zeros((B, n), dtype=torch.float32)
    for i, s in enumerate(seqs):
        m = len(s.input_ids)
        ids[i, :m] = torch.as_tensor(s.input_ids)
        mask[i, :m] = torch.as_tensor(s.loss_mask, dtype=torch.float32)
        old[i, :m] = torch.as_tensor(s.old_logprobs)
        adv[i, :m] = torch.as_tensor(s.advantages)
    # the token at position p is predicted by the logits at p - 1
    return ids, mask[:, 1:], old[:, 1:], adv[:, 1:]


def ppo_update(model, opt, seqs, passes=1, minibatch=16, eps=0.2, max_grad_norm=1.0):
    """PPO-clip passes over seqs (TokenSequences). Returns a dict: first_ratio_dev (mean |ratio-1|
    of the first minibatch before any update), loss (mean over minibatches), tokens, minibatches."""
    model.eval()  # no dropout: the ratio compares the same function the server samples from
    seqs = [s for s in seqs if float(sum(s.loss_mask)) > 0]
    out = {"first_ratio_dev": None, "loss": 0.0, "tokens": int(sum(float(sum(s.loss_mask)) for s in seqs)),
           "minibatches": 0, "clip_frac": 0.0}
    if not seqs:
        return out
    losses = []
    clipped = 0.0
    counted = 0.0
    for p in range(passes):
        order = list(range(len(seqs)))
        if p > 0:
            g = torch.Generator().manual_seed(p)
            order = torch.randperm(len(seqs), generator=g).tolist()
        for i in range(0, len(order), minibatch):
            mb = [seqs[j] for j in order[i:i + minibatch]]
            ids, mask, old, adv = _minibatch_tensors(mb)
            logits = model(ids[:, :-1])
            lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            ratio = torch.exp((lp - old) * mask)
            ntok = mask.sum().clamp(min=1.0)
            if out["first_ratio_dev"] is None:
                out["first_ratio_dev"] = float(((ratio.detach() - 1).abs() * mask).sum() / ntok)
            s1 = ratio * adv
            s2 = torch.clamp(ratio, 1 - eps, 1 + eps) * adv
            loss = -(torch.min(s1, s2) * mask).sum() / ntok
            if not torch.isfinite(loss):
                raise FloatingPointError("the loss is %s" % float(loss))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            opt.step()
            losses.append(float(loss))
            clipped += float((((ratio.detach() - 1).abs() > eps).float() * mask).sum())
            counted += float(mask.sum())
            out["minibatches"] += 1
    out["loss"] = sum(losses) / len(losses)
    out["clip_frac"] = clipped / counted if counted else 0.0
    return out


def log(msg):
    sys.stderr.write("%s selroll.neural train: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), msg))
    sys.stderr.flush()


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m selroll.neural train", description=__doc__.split("\n\n")[0],
                                 epilog="See docs/neural.md, \"GRPO training\".")
    ap.add_argument("--pull", required=True, help="endpoint bound for BATCHes (the coordinator's --trainer-push)")
    ap.add_argument("--ack", required=True, help="endpoint of the coordinator's PULL for WEIGHTS_READY")
    ap.add_argument("--weights-dir", required=True, help="where v<version>.pt checkpoints are written")
    ap.add_argument("--weights", default=DEFAULT_WEIGHTS,
                    help="the starting checkpoint: the one the server serves as version 0 "
                         "(default: the committed household.pt)")
    ap.add_argument("--run", help="accept this run's batches only")
    ap.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate (default 1e-5)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    ap.add_argument("--passes", type=int, default=1, help="passes over each batch, 1 to 4 (default 1)")
    ap.add_argument("--minibatch", type=int, default=16, help="sequences (steps) per minibatch (default 16)")
    ap.add_argument("--eps", type=float, default=0.2, help="PPO clip epsilon (default 0.2)")
    ap.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient norm clip, 0 = off (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--max-batches", type=int, default=0, help="stop after this many batches answered (0 = never)")
    ap.add_argument("--idle-timeout", type=float, default=0,
                    help="exit after this many seconds without a batch (0 = wait forever)")
    ap.add_argument("--stats", help="append one JSON line per batch answered to this file")
    args = ap.parse_args(argv)
    if not 1 <= args.passes <= 4:
        ap.error("--passes must be 1 to 4")
    if args.minibatch < 1 or not 0 < args.eps < 1 or args.lr <= 0:
        ap.error("--minibatch >= 1, 0 < --eps < 1 and --lr > 0")
    torch.set_num_threads(args.threads)
    try:
        model, tok, info = checkpoint.load(args.weights)
    except Exception as e:  # noqa: BLE001
        sys.stderr.write("selroll.neural train: cannot load %s: %s\n" % (args.weights, e))
        return 2
    try:
        os.makedirs(args.weights_dir, exist_ok=True)
    except OSError as e:
        sys.stderr.write("selroll.neural train: --weights-dir %s: %s\n" % (args.weights_dir, e))
        return 2
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    tr = trainer_mod.Trainer(pull=args.pull, push=args.ack, run=args.run,
                             timeout=args.idle_timeout if args.idle_timeout > 0 else None)
    log("%s (%d parameters) on %s, acks to %s, weights to %s" % (
        args.weights, model.n_params(), tr.endpoint, args.ack, args.weights_dir))
    answered = 0
    try:
        for batch in tr:
            t0 = time.time()
            rec = {"run": batch.run, "iteration": batch.iteration, "policy_version": batch.policy_version}
            try:
                seqs = prepare(batch, tok, model.config.n_ctx)
            except Refused as e:
                log("iteration %d refused: %s" % (batch.iteration, e))
                rec.update(ok=False, reason=str(e))
            else:
                snap = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
                try:
                    st = ppo_update(model, opt, seqs, args.passes, args.minibatch, args.eps, args.max_grad_norm)
                except FloatingPointError as e:
                    model.load_state_dict(snap[0])  # the served weights stay the trained ones
                    opt.load_state_dict(snap[1])
                    log("iteration %d refused: %s" % (batch.iteration, e))
                    rec.update(ok=False, reason=str(e))
                else:
                    t1 = time.time()
                    v = batch.next_version
                    path = os.path.abspath(os.path.join(args.weights_dir, "v%d.pt" % v))
                    checkpoint.save(path, model, tok, dict(info, version=v, trained_by="selroll.neural train",
                                                           iteration=batch.iteration, run=batch.run))
                    dev = st["first_ratio_dev"]
                    msg = ("iteration %d -> version %d: %d sequences, %d completion tokens, %d minibatches, "
                           "first-minibatch mean |ratio-1| %s, loss %.6g, clipped %.3f, train %.2f s, save %.2f s"
                           % (batch.iteration, v, len(seqs), st["tokens"], st["minibatches"],
                              "%.3g" % dev if dev is not None else "n/a", st["loss"], st["clip_frac"],
                              t1 - t0, time.time() - t1))
                    log(msg)
                    rec.update(ok=True, version=v, path=path, ratio_dev=dev, loss=st["loss"],
                               sequences=len(seqs), tokens=st["tokens"], clip_frac=st["clip_frac"],
                               train_s=t1 - t0, save_s=time.time() - t1)
            if args.stats:  # written before the answer: whoever reads the ack finds it
                with open(args.stats, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            if rec["ok"]:
                tr.ack(path=rec["path"], loss=rec["loss"], info="mean |ratio-1| %s" % (
                    "%.3g" % rec["ratio_dev"] if rec["ratio_dev"] is not None else "n/a"))
            else:
                tr.refuse(rec["reason"])
            answered += 1
            if args.max_batches and answered >= args.max_batches:
                break
    except KeyboardInterrupt:
        pass
    finally:
        tr.close()
    return 0
