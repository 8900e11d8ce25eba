#!/usr/bin/python3
"""trainer.py — an external trainer for selroll, a user of the selroll package (python/selroll).

The coordinator PUSHes one BATCH per iteration; selroll.Trainer PULLs it and hands it over as a
typed Batch; this program walks every group, trajectory and step (where a real trainer computes
its loss, on selroll.to_tensors(batch) for token ids, loss masks, old logprobs and advantages),
and answers WEIGHTS_READY with trainer.ack() or trainer.refuse(). It does not change any weights: it acks every batch
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

The rules of docs/protocol.md ("The trainer channel") are selroll.Trainer's: a refusal is
WEIGHTS_READY with "ok": false and a "reason" (the version stays what it was); an accepted batch is
acked with "ok": true and the next version; a batch of a run and iteration acked already (the
coordinator sends a batch again after a timeout, and a restarted coordinator may send it again) is
not yielded twice: the Trainer acks it again with the same version by itself.

Plugging in a real trainer (verl, OpenRLHF, TRL) at the marked place:
  - each step carries the chat messages the policy saw (step.messages, recorded by actors with
    --record-messages) and the raw model answer (step.raw); prompt = the messages, response =
    raw, and the token-level advantage is the trajectory's advantage (traj.advantage: the group's
    advantages[i], the audit weight already in it, times the group weight), the same for every
    token of every step of that trajectory (GRPO); with actors run with --tokens full,
    selroll.to_tensors(batch) gives each trajectory's token ids with the loss mask (completion
    tokens 1), the old logprobs and the per-token advantages, numpy arrays;
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
import logging
import os
import sys

try:
    import selroll
except ImportError:  # run from a checkout, without `pip install ./python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import selroll
from selroll.registry import RedisError, connect


def summarise(batch):
    """Walks the batch the way a trainer would; returns (groups, trajectories, steps, messages)."""
    n_traj = n_steps = n_msgs = 0
    for g in batch.groups:
        if len(g.trajectories) != len(g.advantages):
            raise ValueError("group %s: %d trajectories but %d advantages"
                             % (g.group, len(g.trajectories), len(g.advantages)))
        for traj in g.trajectories:
            n_traj += 1
            for step in traj.steps:
                n_steps += 1
                messages = step.messages                 # the prompt the policy saw
                response = step.raw                      # what it answered
                token_advantage = traj.advantage         # advantages[i] x weight, every token
                n_msgs += len(messages)
                # <-- a real trainer accumulates its loss here (see the module comment)
                del response, token_advantage
    return len(batch.groups), n_traj, n_steps, n_msgs


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
    ap.add_argument("--curve-keys", metavar="DIR", help="CURVE keys (selroll keygen): the PULL "
                    "admits the authorised keys, the PUSH uses trainer.key")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="trainer.py: %(message)s", stream=sys.stdout)
    redis = connect(args.redis) if args.redis else None
    trainer = selroll.Trainer(pull=args.pull, push=args.push, run=args.run,
                              curve_keys=args.curve_keys)
    refused_one = False
    done = 0
    try:
        for batch in trainer:
            try:
                checked = ""
                if args.check:
                    n, audited = selroll.check_advantages(batch)
                    checked = "; advantages of %d groups (%d audited) follow from the rewards " \
                              "(%s)" % (n, audited, batch.estimator)
                if args.refuse_first and not refused_one:
                    refused_one = True
                    raise ValueError("--refuse-first: the first batch is refused on purpose")
                groups, trajs, steps, msgs = summarise(batch)
                if redis is not None:
                    key = "selroll:%s:weights:%%d" % batch.run
                    if redis.call("COPY", key % batch.policy_version, key % batch.next_version,
                                  "REPLACE") != 1:
                        raise ValueError("no weights of version %d in Redis to carry over"
                                         % batch.policy_version)
                info = ("acknowledged without training: %d groups, %d trajectories, %d steps, %d "
                        "messages%s" % (groups, trajs, steps, msgs, checked))
                path = args.path.replace("{version}", str(batch.next_version)) if args.path else None
                trainer.ack(path=path, loss=0.0, info=info)
            except (ValueError, OSError, RedisError) as e:
                info = "refused: %s" % e
                trainer.refuse(e)
            print("trainer.py: iteration %d -> %s" % (batch.iteration, info), flush=True)
            done += 1
            if args.count and done >= args.count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
