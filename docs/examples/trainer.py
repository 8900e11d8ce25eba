#!/usr/bin/python3
"""trainer.py — an external trainer for selroll: it speaks the trainer channel of docs/protocol.md.

The coordinator PUSHes one BATCH per iteration; this program PULLs it, walks every group,
trajectory and step (where a real trainer computes its loss), and answers WEIGHTS_READY on a PUSH
socket connected to the coordinator's PULL. It does not change any weights: it acks every batch
with the next version number so that a run can proceed on its acks (the policy server keeps
serving what it has, or the weights you publish under that version).

    trainer.py --pull tcp://*:5570 --push tcp://127.0.0.1:5571 [--run RUN] [--count N]
               [--check] [--refuse-first] [--redis redis://HOST:PORT[/DB]]

--pull binds (the coordinator connects its PUSH here), --push connects (to the coordinator's PULL
for the acks). --count N exits after N batches (0 = serve until interrupted). --check recomputes
every group's advantages from its rewards with the batch's estimator and audit weight and refuses
a batch where they differ. --refuse-first refuses the first batch (ok false, with a reason), to
see the coordinator send it again. --redis (for runs served by selroll's built-in policy server,
which loads each version's weights from Redis): before acking version N+1 the trainer copies the
weights of the batch's version N to N+1 (`COPY selroll:<run>:weights:<N> ...:<N+1>`), so the server
can serve the version this trainer names — untrained weights under a new number. Without it, the
built-in server has no weights for the new version and the actors' requests for it fail (the run
stops, naming `policy version N+1 has no weights`).

The rules of docs/protocol.md ("The trainer channel") it follows: a refusal is WEIGHTS_READY with
"ok": false and a "reason" (the version stays what it was); an accepted batch is acked with "ok":
true and the next version; a batch of a run and iteration it acked already (the coordinator sends
a batch again after a timeout or a refusal, and a restarted coordinator may send it again) is not
trained twice: it is acked again with the same version.

Plugging in a real trainer (verl, OpenRLHF, TRL) at the marked place:
  - each step carries the chat messages the policy saw (step["messages"], recorded by actors with
    --record-messages) and the raw model answer (step["raw"]); prompt = the messages, response =
    raw, and the token-level advantage is the trajectory's advantage (g["advantages"], the audit
    weight already in it) times the group weight, the same for every token of every step of that
    trajectory (GRPO);
  - verl: build a DataProto with input_ids/responses/attention_mask from the tokenised prompt and
    response, put the advantages in batch["advantages"] (skip verl's own advantage estimator, the
    coordinator already normalised within groups) and call the actor's update_policy; OpenRLHF:
    fill an Experience per step (sequences, action_mask, advantages) and call the PPO actor's
    training step; TRL: feed (prompt, completion, advantage) to a GRPOTrainer subclass whose
    _generate_and_score_completions returns these instead of sampling;
  - after the update, publish the weights where the inference servers read them (for vLLM, load
    the new checkpoint, e.g. /v1/load_lora_adapter or a restart, or send --path and let the
    coordinator's --weights-sync do it), then send WEIGHTS_READY with the
    new version. The coordinator announces it (POLICY_VERSION) and samples the next iteration
    with it.
"""
import argparse
import math
import socket
import sys
import urllib.parse

import msgpack
import zmq


def estimator_advantages(estimator, rewards):
    """The advantages the coordinator computes (docs/training.md, "Advantages"), before the audit
    weight: in the same order of operations, so they agree to the last bit or nearly."""
    n = len(rewards)
    if n <= 1 or all(abs(r - rewards[0]) <= 1e-9 for r in rewards):
        return [0.0] * n                       # zero variance: no signal, exact zeros
    total = 0.0
    for r in rewards:
        total += r
    mean = total / n
    var = 0.0
    for r in rewards:
        var += (r - mean) * (r - mean)
    std = math.sqrt(var / n)
    if estimator == "grpo":
        return [(r - mean) / (std + 1e-6) for r in rewards]
    if estimator == "rloo":
        return [r - (total - r) / (n - 1) for r in rewards]
    if estimator == "dr-grpo":
        return [r - mean for r in rewards]
    raise ValueError("unknown estimator %r" % estimator)


def check_advantages(batch):
    """Checks every group: advantages_raw follow from the rewards with the estimator, and
    advantages = advantages_raw x audit_weight. Returns (groups checked, audited groups)."""
    estimator = batch.get("estimator", "grpo")
    audited = 0
    for i, g in enumerate(batch["groups"]):
        w = g.get("audit_weight", 1.0)
        raw = g.get("advantages_raw", g["advantages"] if w == 1.0 else None)
        if raw is None:
            raise ValueError("groups[%d]: audit_weight %g but no advantages_raw" % (i, w))
        if w != 1.0:
            audited += 1
        want = estimator_advantages(estimator, g["rewards"])
        for k, (a, r, e) in enumerate(zip(g["advantages"], raw, want)):
            if abs(r - e) > 1e-9 * max(1.0, abs(e)):
                raise ValueError("groups[%d].advantages_raw[%d] is %r, %s of the rewards gives %r"
                                 % (i, k, r, estimator, e))
            if abs(a - r * w) > 1e-12 * max(1.0, abs(a)):
                raise ValueError("groups[%d].advantages[%d] is %r, not advantages_raw x "
                                 "audit_weight = %r" % (i, k, a, r * w))
    return len(batch["groups"]), audited


def summarise(batch):
    """Walks the batch the way a trainer would; returns (groups, trajectories, steps, messages)."""
    n_traj = n_steps = n_msgs = 0
    for g in batch["groups"]:
        weight = g.get("weight", 1.0)
        if len(g["trajectories"]) != len(g["advantages"]):
            raise ValueError("group %s: %d trajectories but %d advantages"
                             % (g["group"], len(g["trajectories"]), len(g["advantages"])))
        for traj, adv in zip(g["trajectories"], g["advantages"]):
            n_traj += 1
            for step in traj["steps"]:
                n_steps += 1
                messages = step.get("messages", [])     # the prompt the policy saw
                response = step["raw"]                   # what it answered
                token_advantage = adv * weight           # the same for every token of the step
                n_msgs += len(messages)
                # <-- a real trainer accumulates its loss here (see the module comment)
                del response, token_advantage
    return len(batch["groups"]), n_traj, n_steps, n_msgs


def redis_command(url, *args):
    """One command to the Redis server at url (redis://[:PASSWORD@]HOST[:PORT][/DB]), the reply."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "redis" or not u.hostname:
        raise ValueError("--redis: not a redis://HOST[:PORT][/DB] URL: %r" % url)
    cmds = []
    if u.password:
        cmds.append(("AUTH", u.password) if not u.username else ("AUTH", u.username, u.password))
    if u.path.strip("/"):
        cmds.append(("SELECT", u.path.strip("/")))
    cmds.append(args)
    with socket.create_connection((u.hostname, u.port or 6379), timeout=5) as s:
        f = s.makefile("rb")
        for c in cmds:
            parts = [str(a).encode() for a in c]
            s.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
            line = f.readline().rstrip(b"\r\n")
            if not line or line[:1] == b"-":
                raise ValueError("redis %s: %s" % (c[0], line[1:].decode(errors="replace") or "no answer"))
        return int(line[1:]) if line[:1] == b":" else line[1:].decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pull", default="tcp://*:5570", help="bind: BATCHes arrive here")
    ap.add_argument("--push", default="tcp://127.0.0.1:5571", help="connect: the coordinator's PULL")
    ap.add_argument("--run", help="accept batches of this run only")
    ap.add_argument("--count", type=int, default=0, help="exit after N batches (0 = never)")
    ap.add_argument("--check", action="store_true",
                    help="check every group's advantages against its rewards; refuse on a mismatch")
    ap.add_argument("--path", metavar="TEMPLATE",
                    help="put path TEMPLATE ({version} replaced) into every WEIGHTS_READY: where "
                         "this trainer saved the version, for the coordinator's --weights-sync")
    ap.add_argument("--refuse-first", action="store_true",
                    help="refuse the first batch (ok false, with a reason)")
    ap.add_argument("--redis", help="copy the weights of the batch's version to the acked one in "
                    "this Redis (for selroll's built-in policy server)")
    args = ap.parse_args()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(args.pull)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(args.push)
    version = None        # the latest version this trainer acknowledged
    acked = {}            # (run, iteration) -> the version it was acked with
    refused_one = False
    done = 0
    try:
        while args.count == 0 or done < args.count:
            raw = pull.recv()
            try:
                b = msgpack.unpackb(raw, raw=False)
                if not isinstance(b, dict) or b.get("t") != "BATCH":
                    raise ValueError("not a BATCH")
                run, it, pv = b["run"], int(b["iteration"]), int(b["policy_version"])
            except (ValueError, KeyError, TypeError, msgpack.exceptions.ExtraData,
                    msgpack.exceptions.FormatError, msgpack.exceptions.StackError) as e:
                print("trainer.py: discarded a message (%d bytes): %s" % (len(raw), e), file=sys.stderr)
                continue
            ack = {"t": "WEIGHTS_READY", "v": 1, "run": run, "iteration": it}
            try:
                if args.run and run != args.run:
                    raise ValueError("batch of run %r, this trainer serves %r" % (run, args.run))
                if (run, it) in acked:           # sent again: ack again, with the same version
                    ack.update(ok=True, version=acked[(run, it)],
                               info="iteration %d acknowledged already (a batch sent again)" % it)
                else:
                    checked = ""
                    if args.check:
                        n, audited = check_advantages(b)
                        checked = "; advantages of %d groups (%d audited) follow from the rewards " \
                                  "(%s)" % (n, audited, b.get("estimator", "grpo"))
                    if args.refuse_first and not refused_one:
                        refused_one = True
                        raise ValueError("--refuse-first: the first batch is refused on purpose")
                    groups, trajs, steps, msgs = summarise(b)
                    new = max(pv, version if version is not None else pv) + 1
                    if args.redis:
                        key = "selroll:%s:weights:%%d" % run
                        if redis_command(args.redis, "COPY", key % pv, key % new, "REPLACE") != 1:
                            raise ValueError("no weights of version %d in Redis to carry over" % pv)
                    version = new
                    acked[(run, it)] = version
                    if args.path:
                        ack["path"] = args.path.replace("{version}", str(version))
                    ack.update(ok=True, version=version, loss=0.0,
                               info="acknowledged without training: %d groups, %d trajectories, "
                                    "%d steps, %d messages%s" % (groups, trajs, steps, msgs, checked))
            except (ValueError, KeyError, TypeError, OSError) as e:
                ack.update(ok=False, version=version if version is not None else pv,
                           reason=str(e)[:1000], info="refused: %s" % e)
            push.send(msgpack.packb(ack, use_bin_type=True))
            print("trainer.py: iteration %d -> %s" % (it, ack["info"]), flush=True)
            done += 1
    except KeyboardInterrupt:
        pass
    finally:
        pull.close(0)
        push.close()
        ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
