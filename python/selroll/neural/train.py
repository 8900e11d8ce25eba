"""Pre-training by behaviour cloning (python3 -m selroll.neural pretrain).

The C expert plays train tasks with exploration noise (`selroll env expert --jsonl --noise P`):
a share of the steps take another admissible action, the expert reads the outcome and replans,
so the demonstrations hold recoveries. Every step is rendered through the agent's prompt (the
history shows the actions taken; the answer is the expert's choice) and the model learns the
answer's tokens (next-token loss on the completion only). Training runs in chunks: each chunk
resumes the work directory's state, trains at most --chunk-minutes, saves, and evaluates greedy
success on --eval-tasks valid_unseen tasks. The run stops when an evaluation lands in the
target band (--target-min..--target-max) or the planned epochs are done; the chosen weights are
written to --out with a JSON beside them saying how they were made.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

from . import agent, checkpoint, data, tokenizer
from .model import GPT, Config


def log(work, msg):
    line = "%s %s" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), msg)
    print(line, flush=True)
    with open(os.path.join(work, "log.txt"), "a") as f:
        f.write(line + "\n")


def prepare(args, work):
    """Demonstrations, tokenizer and encoded examples, made once per work directory."""
    enc_path = os.path.join(work, "examples.pt")
    if os.path.exists(enc_path):
        return torch.load(enc_path)
    jl = os.path.join(work, "train.jsonl")
    t0 = time.time()
    lines = data.expert_jsonl("train", args.first_task, args.train_tasks, args.noise, args.seed, jl,
                              bad_noise=args.bad_noise)
    eps = list(data.episodes(lines))
    exs = list(data.examples(eps))
    log(work, "demonstrations: %d train tasks from %d, noise %.2f, bad noise %.2f, %d episodes won by the expert, "
        "%d steps (%.1f s)" % (len(eps), args.first_task, args.noise, args.bad_noise, sum(e["won"] for e in eps),
                               len(exs), time.time() - t0))
    if args.init:
        _, tok, _ = checkpoint.load(args.init)
        log(work, "tokenizer of %s" % args.init)
    else:
        rng = random.Random(args.seed)
        sample = rng.sample(exs, min(len(exs), 6000))
        tok = tokenizer.build([p + a for p, a in sample])
    seqs, starts = [], []
    for p, a in exs:
        pi = tok.encode(p)
        ai = tok.encode(a) + [tokenizer.EOS]
        seqs.append(torch.tensor(pi + ai, dtype=torch.int16))
        starts.append(len(pi))
    lens = [len(s) for s in seqs]
    log(work, "tokenizer: %d ids; sequences mean %.1f, max %d tokens; %d tokens in all"
        % (tok.vocab_size, sum(lens) / len(lens), max(lens), sum(lens)))
    d = {"tokenizer": tok.to_json(), "seqs": seqs, "starts": starts,
         "data": {"train_tasks": args.train_tasks, "first_task": args.first_task, "noise": args.noise,
                  "bad_noise": args.bad_noise, "seed": args.seed, "init": args.init,
                  "episodes": len(eps), "steps": len(exs), "tokens": sum(lens)}}
    torch.save(d, enc_path)
    return d


def batches(lens, batch_tokens, rng):
    """Index batches of similar lengths, at most batch_tokens padded tokens each, shuffled."""
    order = sorted(range(len(lens)), key=lambda i: (lens[i], rng.random()))
    out, cur, mx = [], [], 0
    for i in order:
        m = max(mx, lens[i])
        if cur and m * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, m = [], lens[i]
        cur.append(i)
        mx = m
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def loss_on(model, seqs, starts, idx):
    b = len(idx)
    t = max(len(seqs[i]) for i in idx)
    x = torch.zeros(b, t, dtype=torch.long)
    tgt_mask = torch.zeros(b, t, dtype=torch.bool)
    for r, i in enumerate(idx):
        s = seqs[i].long()
        x[r, :len(s)] = s
        tgt_mask[r, starts[i] - 1:len(s) - 1] = True  # positions whose next token is an answer token
    pos = torch.arange(t)
    h = model.wte(x) + model.wpe(pos)
    for blk in model.blocks:
        h, _ = blk(h)
    sel = h[tgt_mask]
    logits = model.logits(sel)
    targets = x[:, 1:][tgt_mask[:, :-1]]
    return F.cross_entropy(logits, targets), int(x.numel())


def evaluate(model, tok, n_tasks, seed=0):
    tasks = ["household/valid_unseen/%d" % i for i in range(n_tasks)]
    res = agent.play(model, tok, tasks, temperature=0.0, seed=seed)
    won = sum(1 for _, w, _ in res if w)
    return won / len(res), res


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m selroll.neural pretrain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="build/neural/pretrain", help="work directory (state, log, data)")
    ap.add_argument("--out", default=None, help="final checkpoint path (default: WORK/model.pt)")
    ap.add_argument("--train-tasks", type=int, default=12000)
    ap.add_argument("--noise", type=float, default=0.25, help="share of steps taking another admissible action")
    ap.add_argument("--bad-noise", type=float, default=0.0,
                    help="share of steps sending an action that is not admissible (the data then shows how to "
                         "go on after \"Nothing happens.\")")
    ap.add_argument("--first-task", type=int, default=0, help="first train task index of the demonstrations")
    ap.add_argument("--init", default=None, help="start from this checkpoint's weights and tokenizer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--chunk-minutes", type=float, default=18.0, help="train at most this long, then save and exit")
    ap.add_argument("--eval-minutes", type=float, default=9.0, help="evaluate after this much training")
    ap.add_argument("--eval-steps", type=int, default=0,
                    help="evaluate every N optimizer steps (deterministic points; default: by --eval-minutes and at "
                         "each chunk's end)")
    ap.add_argument("--eval-tasks", type=int, default=48)
    ap.add_argument("--target-min", type=float, default=0.30)
    ap.add_argument("--target-max", type=float, default=0.50)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    work = args.work
    os.makedirs(work, exist_ok=True)
    out = args.out or os.path.join(work, "model.pt")
    prog_path = os.path.join(work, "progress.json")
    prog = json.load(open(prog_path)) if os.path.exists(prog_path) else {"evals": [], "losses": []}
    if prog.get("done"):
        log(work, "already done: %s" % prog["done"])
        src = prog["done"]["out"]
        if os.path.abspath(src) != os.path.abspath(out) and os.path.exists(src):
            import shutil
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            shutil.copyfile(src, out)
            shutil.copyfile(os.path.splitext(src)[0] + ".json", os.path.splitext(out)[0] + ".json")
            log(work, "copied to %s" % out)
        return 0
    d = prepare(args, work)
    tok = tokenizer.Tokenizer.from_json(d["tokenizer"])
    seqs, starts = d["seqs"], d["starts"]
    lens = [len(s) for s in seqs]
    state_path = os.path.join(work, "state.pt")
    if os.path.exists(state_path):
        st = torch.load(state_path)
        cfg = Config(**st["config"])
        model = GPT(cfg)
        model.load_state_dict(st["model"])
        hp = st["hparams"]
    elif args.init:
        model, _, init_info = checkpoint.load(args.init)
        model.train()
        cfg = model.config
        hp = {"epochs": args.epochs, "batch_tokens": args.batch_tokens, "lr": args.lr, "seed": args.seed,
              "init": args.init, "init_info": init_info}
        st = None
    else:
        cfg = Config(vocab_size=tok.vocab_size, n_ctx=args.n_ctx, n_layer=args.layers, n_head=args.heads,
                     d_model=args.d_model)
        model = GPT(cfg)
        hp = {"epochs": args.epochs, "batch_tokens": args.batch_tokens, "lr": args.lr, "seed": args.seed}
        st = None
    torch.manual_seed(hp["seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    n_batches = len(batches(lens, hp["batch_tokens"], random.Random(0)))
    total_steps = int(hp["epochs"] * n_batches)
    step, epoch, pos, trained_s, tokens_seen = 0, 0, 0, 0.0, 0
    if st:
        opt.load_state_dict(st["opt"])
        step, epoch, pos, trained_s, tokens_seen = st["step"], st["epoch"], st["pos"], st["trained_s"], st["tokens"]
    log(work, "model: %d parameters (%d layers, d %d, %d heads, ctx %d, vocab %d); step %d of %d, epoch %d"
        % (model.n_params(), cfg.n_layer, cfg.d_model, cfg.n_head, cfg.n_ctx, cfg.vocab_size, step, total_steps, epoch))
    warm = 200

    def lr_at(s):
        if s < warm:
            return hp["lr"] * (s + 1) / warm
        return hp["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, total_steps)))))

    def save_state():
        torch.save({"config": cfg.__dict__, "model": model.state_dict(), "opt": opt.state_dict(), "hparams": hp,
                    "step": step, "epoch": epoch, "pos": pos, "trained_s": trained_s, "tokens": tokens_seen},
                   state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
        json.dump(prog, open(prog_path + ".tmp", "w"), indent=1)
        os.replace(prog_path + ".tmp", prog_path)

    def info(extra):
        i = {"made_by": "python3 -m selroll.neural pretrain " + " ".join(argv), "data": d["data"],
             "model": {"parameters": model.n_params(), **cfg.__dict__}, "hparams": hp, "step": step,
             "epochs_done": round(step / max(1, n_batches), 3), "train_seconds": round(trained_s), "tokens": tokens_seen,
             "torch": torch.__version__}
        i.update(extra)
        return i

    chunk_start = time.time()
    last_eval = trained_s

    def chunk_over():
        return time.time() - chunk_start >= args.chunk_minutes * 60

    def eval_due():
        if args.eval_steps:
            return step > 0 and step % args.eval_steps == 0 and all(e["step"] != step for e in prog["evals"])
        return trained_s - last_eval >= args.eval_minutes * 60
    model.train()
    run_loss, run_n, t_last = 0.0, 0, time.time()
    while step < total_steps:
        order = batches(lens, hp["batch_tokens"], random.Random(hp["seed"] * 1000 + epoch))
        while pos < len(order) and step < total_steps:
            t0 = time.time()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss, ntok = loss_on(model, seqs, starts, order[pos])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            pos += 1
            tokens_seen += ntok
            trained_s += time.time() - t0
            run_loss += float(loss)
            run_n += 1
            if step % 100 == 0:
                el = time.time() - t_last
                log(work, "step %d/%d epoch %d loss %.4f lr %.2e %.0f tokens/s" % (
                    step, total_steps, epoch, run_loss / run_n, lr_at(step), run_n * hp["batch_tokens"] / max(el, 1e-9)))
                prog["losses"].append([step, round(run_loss / run_n, 5), round(trained_s)])
                run_loss, run_n, t_last = 0.0, 0, time.time()
            if eval_due() or chunk_over():
                break
        if pos >= len(order):
            epoch += 1
            pos = 0
        done_training = step >= total_steps
        if eval_due() or done_training or (chunk_over() and not args.eval_steps):
            model.eval()
            t0 = time.time()
            succ, res = evaluate(model, tok, args.eval_tasks)
            model.train()
            last_eval = trained_s
            prog["evals"].append({"step": step, "epochs": round(step / n_batches, 3), "train_seconds": round(trained_s),
                                  "success": succ, "won": sum(1 for _, w, _ in res if w), "tasks": len(res),
                                  "mean_steps": sum(s for _, _, s in res) / len(res)})
            log(work, "eval at step %d: greedy success %.1f%% on %d valid_unseen tasks (%.0f s)" % (
                step, 100 * succ, len(res), time.time() - t0))
            snap = os.path.join(work, "eval-step%d.pt" % step)
            checkpoint.save(snap, model, tok, info({"valid_unseen_greedy_success": succ, "eval_tasks": len(res)}))
            save_state()
            try:
                from . import figure
                with open(os.path.join(work, "progress.svg"), "w") as f:
                    f.write(figure.svg(prog, "selroll.neural pre-training (behaviour cloning with exploration noise)"))
            except Exception as e:  # noqa: BLE001 - a figure is not worth a chunk
                log(work, "figure: %s" % e)
            if args.target_min <= succ <= args.target_max or done_training:
                final = info({"valid_unseen_greedy_success": succ, "eval_tasks": len(res), "evals": prog["evals"]})
                checkpoint.save(out, model, tok, final)
                with open(os.path.splitext(out)[0] + ".json", "w") as f:
                    json.dump(final, f, indent=1)
                prog["done"] = {"step": step, "success": succ, "out": out}
                save_state()
                log(work, "done: %s (success %.1f%%)" % (out, 100 * succ))
                return 0
        if chunk_over():
            save_state()
            log(work, "chunk over at step %d; run again to resume" % step)
            return 3
    save_state()
    return 0
