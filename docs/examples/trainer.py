#!/usr/bin/python3
"""trainer.py — an external trainer for selroll: it speaks the trainer channel of docs/protocol.md.

The coordinator PUSHes one BATCH per iteration; this program PULLs it, walks every group,
trajectory and step (where a real trainer computes its loss), and answers WEIGHTS_READY on a PUSH
socket connected to the coordinator's PULL. It does not change any weights: it acks every batch
with the next version number so that a run can proceed on its acks (the policy server keeps
serving what it has, or the weights you publish under that version).

    trainer.py --pull tcp://*:5570 --push tcp://127.0.0.1:5571 [--run RUN] [--count N]

--pull binds (the coordinator connects its PUSH here), --push connects (to the coordinator's PULL
for the acks). --count N exits after N batches (0 = serve until interrupted).

Plugging in a real trainer (verl, OpenRLHF, TRL) at the marked place:
  - each step carries the chat messages the policy saw (step["messages"], recorded by actors with
    --record-messages) and the raw model answer (step["raw"]); prompt = the messages, response =
    raw, and the token-level advantage is the trajectory's advantage times the group weight, the
    same for every token of every step of that trajectory (GRPO);
  - verl: build a DataProto with input_ids/responses/attention_mask from the tokenised prompt and
    response, put the advantages in batch["advantages"] (skip verl's own advantage estimator, the
    coordinator already normalised within groups) and call the actor's update_policy; OpenRLHF:
    fill an Experience per step (sequences, action_mask, advantages) and call the PPO actor's
    training step; TRL: feed (prompt, completion, advantage) to a GRPOTrainer subclass whose
    _generate_and_score_completions returns these instead of sampling;
  - after the update, publish the weights where the inference servers read them (for vLLM, load
    the new checkpoint, e.g. /v1/load_lora_adapter or a restart), then send WEIGHTS_READY with the
    new version. The coordinator announces it (POLICY_VERSION) and samples the next iteration
    with it.
"""
import argparse
import sys

import msgpack
import zmq


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pull", default="tcp://*:5570", help="bind: BATCHes arrive here")
    ap.add_argument("--push", default="tcp://127.0.0.1:5571", help="connect: the coordinator's PULL")
    ap.add_argument("--run", help="accept batches of this run only")
    ap.add_argument("--count", type=int, default=0, help="exit after N batches (0 = never)")
    args = ap.parse_args()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(args.pull)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(args.push)
    version = None        # the latest version this trainer acknowledged
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
                groups, trajs, steps, msgs = summarise(b)
                version = max(pv, version if version is not None else pv) + 1
                ack.update(version=version, loss=0.0,
                           info="acknowledged without training: %d groups, %d trajectories, %d steps, "
                                "%d messages" % (groups, trajs, steps, msgs))
            except (ValueError, KeyError, TypeError) as e:
                ack.update(version=version if version is not None else pv, info="refused: %s" % e)
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
