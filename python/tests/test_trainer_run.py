"""selroll.Trainer against a real coordinator: `selroll run --trainer PULL,ACK` with the built-in
policy server (--tokens full) and the games env worker. The loop refuses the first batch once and
acks its resend; iteration 1 is held until the coordinator sends it again (--weights-timeout-ms),
and that copy is answered by the Trainer itself (the coordinator counts a duplicate ack while it
waits for iteration 2); to_tensors is checked on the real batches."""
import glob
import os
import subprocess
import sys
import threading
import time

import pytest

import selroll
from selroll.registry import connect
from conftest import free_port, read
from test_env_worker_run import iterations



def check_sequences(batch, seqs):
    """ids, mask, old logprobs and advantages of to_tensors against the batch's own steps."""
    by_traj = {}
    for s in seqs:
        by_traj.setdefault((s.group, s.traj), []).append(s)
    n_multi = 0
    for gi, g in enumerate(batch.groups):
        for ti, t in enumerate(g.trajectories):
            got = by_traj.get((gi, ti))
            assert got, "trajectory %d/%d has no sequence" % (gi, ti)
            covered = [k for s in got for k in s.steps]
            assert covered == list(range(len(t.steps))), "steps covered %s" % covered
            prompts = t.prompts()
            # a step joins its predecessor's sequence exactly when its prompt extends the
            # previous prompt and completion (docs/training.md, "Token-level trainers")
            joins = sum(1 for k in range(1, len(t.steps)) if t.steps[k].prompt_prefix ==
                        len(prompts[k - 1]) + len(t.steps[k - 1].token_ids))
            assert len(got) == len(t.steps) - joins
            for s in got:
                ids, mask = [int(x) for x in s.input_ids], [int(x) for x in s.loss_mask]
                lps, adv = [float(x) for x in s.old_logprobs], [float(x) for x in s.advantages]
                assert len(ids) == len(mask) == len(lps) == len(adv)
                if len(s.steps) > 1:
                    n_multi += 1
                # The sequence is the last covered step's whole prompt plus its completion.
                last = t.steps[s.steps[-1]]
                assert ids == list(prompts[s.steps[-1]]) + list(last.token_ids)
                # It starts with the first covered step's prompt, masked 0.
                first = list(prompts[s.steps[0]])
                assert ids[:len(first)] == first and not any(mask[:len(first)])
                # Runs of 1s in the mask: one per step, exactly its completion ids.
                runs, k = [], 0
                while k < len(mask):
                    if mask[k]:
                        j = k
                        while j < len(mask) and mask[j]:
                            j += 1
                        runs.append((k, j))
                        k = j
                    else:
                        k += 1
                steps = [t.steps[k] for k in s.steps]
                assert len(runs) == len(steps)
                for (a, b), st in zip(runs, steps):
                    assert ids[a:b] == list(st.token_ids)
                    assert lps[a:b] == pytest.approx([float(x) for x in st.token_logprobs])
                    # old logprobs under the step's mask sum to the step's logprob (float32)
                    assert sum(lps[a:b]) == pytest.approx(st.logprob, rel=1e-5, abs=1e-4)
                    assert all(x == pytest.approx(t.advantage, rel=1e-6) for x in adv[a:b])
                assert all(lps[i] == 0.0 and adv[i] == 0.0 for i in range(len(ids)) if not mask[i])
            assert t.advantage == pytest.approx(g.advantages[ti] * g.weight)
    return n_multi


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_trainer_against_a_real_coordinator(selroll_bin, procs, redis, tmp_path, task_files, curve):
    train, held, tmpl = task_files
    tmp = str(tmp_path)
    wport, pull, ack = free_port(), free_port(), free_port()
    keys, curve_args = None, []
    if curve:   # every socket CURVE: the coordinator's PUSH meets the Trainer's ZAP handler
        keys = os.path.join(tmp, "keys")
        subprocess.run([selroll_bin, "keygen", keys], check=True, capture_output=True)
        curve_args = ["--curve-keys", keys]
    procs.env_worker("worker", wport, *curve_args)
    trainer = selroll.Trainer(pull="tcp://127.0.0.1:%d" % pull, push="tcp://127.0.0.1:%d" % ack,
                              run="tr", timeout=60, curve_keys=keys)
    seen, notes, errors = [], {}, []
    r = connect(redis.url)

    def loop():
        try:
            for batch in trainer:
                seen.append((batch.iteration, batch.policy_version))
                if batch.iteration == 0 and "refused" not in notes:
                    notes["refused"] = batch
                    trainer.refuse("the first batch is refused on purpose")
                    continue
                seqs = selroll.to_tensors(batch)
                notes.setdefault("multi", 0)
                notes["multi"] += check_sequences(batch, seqs)
                notes.setdefault("sequences", []).append(len(seqs))
                notes["numpy"] = type(seqs[0].input_ids).__module__
                if batch.iteration == 1:
                    # Hold the ack until the coordinator sends the batch again (its
                    # --weights-timeout-ms ran out): that copy waits in the socket meanwhile.
                    assert trainer.pull.poll(15000), "the coordinator did not send the batch again"
                # The built-in policy server serves version N+1 from Redis: carry the weights over.
                key = "selroll:%s:weights:%%d" % batch.run
                r.call("COPY", key % batch.policy_version, key % batch.next_version, "REPLACE")
                trainer.ack(path="/ckpt/v%d" % batch.next_version, loss=0.5, info="checked")
                if batch.iteration == 2:
                    break
            # The copy of iteration 1 was answered by the Trainer, never yielded.
            assert trainer.next_batch(timeout=5) is None
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    th = threading.Thread(target=loop)
    th.start()
    p = subprocess.run([selroll_bin, "run", "--run", "tr", "--out", os.path.join(tmp, "out"),
                        "--http", "off", "--grace-ms", "1000", "--redis", redis.url,
                        "--tasks-file", "train=" + train, "--eval-tasks", "0",
                        "--env-endpoints", "games=tcp://127.0.0.1:%d" % wport,
                        "--actor-args", "--template " + tmpl, "--tokens", "full",
                        "--trainer", "tcp://127.0.0.1:%d,tcp://127.0.0.1:%d" % (pull, ack),
                        "--weights-timeout-ms", "2500", "--iters", "3", "--actors", "1",
                        "--slots", "8", "--group-size", "4", "--batch-groups", "2",
                        "--max-steps", "6", "--no-gate"] + curve_args,
                       capture_output=True, text=True, timeout=120, cwd=tmp)
    th.join(30)
    zap = (trainer.auth.allowed, trainer.auth.refused) if trainer.auth else None
    trainer.close()
    assert not errors, "the trainer loop failed: %r" % errors[0]
    assert p.returncode == 0, "selroll run exited %d:\n%s" % (p.returncode, p.stderr[-3000:])
    out = os.path.join(tmp, "out")
    coord = "".join(read(f) for f in glob.glob(os.path.join(out, "logs", "coordinator*.log")))

    # refuse once, then ack: iteration 0 was yielded twice (the refusal, then its resend)
    assert seen == [(0, 0), (0, 0), (1, 1), (2, 2)], seen
    assert "the trainer refused the batch (version stays 0): the first batch is refused on purpose" in coord
    # the resent batch of iteration 1 was acked once by the loop, once more by the Trainer
    assert trainer.stats["acked"] == 3 and trainer.stats["refused"] == 1
    assert trainer.stats["resent_acked"] == 1, trainer.stats
    assert "duplicate WEIGHTS_READY of iteration 1 (version 2)" in coord
    its = iterations(out)
    assert [i["policy_version_after"] for i in its] == [1, 2, 3]
    assert all(i.get("trainer_info") == "checked" and i.get("loss") == 0.5 for i in its)

    # to_tensors: numpy arrays here. The default template renders each step's prompt afresh
    # (history as text), so no prompt extends the previous turn: one sequence a step
    # (test_to_tensors_without_numpy_gives_lists has turns that chain).
    assert notes["numpy"] == "numpy"
    b = notes["refused"]
    assert isinstance(b, selroll.Batch) and b.estimator == "grpo" and b.stats["batch_groups"] >= 2
    g = b.groups[0]
    assert isinstance(g, selroll.Group) and len(g.rewards) == len(g.advantages) == len(g.trajectories) == 4
    assert g.advantages == pytest.approx([a * g.audit_weight for a in g.advantages_raw])
    st = g.trajectories[0].steps[0]
    assert isinstance(st, selroll.Step) and st.messages and st.token_ids and st.prompt_token_ids
    if curve:   # the coordinator's key was admitted by the Trainer's own ZAP handler
        assert zap[0] >= 1 and zap[1] == 0, zap


def test_to_tensors_without_numpy_gives_lists(tmp_path):
    """Without numpy (a child whose numpy import fails), to_tensors gives lists."""
    code = r"""
import sys
sys.modules["numpy"] = None          # import numpy now raises ImportError
import array, selroll
from selroll.trainer import Batch, Group, Trajectory, Step
ids = lambda *x: array.array("i", x)
lp = lambda *x: array.array("f", x)
s0 = Step(i=0, action="a", raw="r", obs="o", reward=0.0, done=False, logprob=-0.75,
          token_ids=ids(7, 8), token_logprobs=lp(-0.5, -0.25), prompt_token_ids=ids(1, 2, 3))
s1 = Step(i=1, action="a", raw="r", obs="o", reward=1.0, done=True, logprob=-0.5,
          token_ids=ids(9), token_logprobs=lp(-0.5), prompt_token_ids=ids(4, 5), prompt_prefix=5)
t = Trajectory(job_id="j", group="g", task="x", traj=0, status="done", reward=1.0, won=True,
               n_steps=2, steps=[s0, s1], advantage=1.5)
b = Batch(run="r", iteration=0, policy_version=0, estimator="grpo", stats={},
          groups=[Group(group="g", task="x", rewards=[1.0], advantages=[1.5], advantages_raw=[1.5],
                        trajectories=[t])])
(s,) = selroll.to_tensors(b)
assert "numpy" not in sys.modules or sys.modules["numpy"] is None
assert isinstance(s.input_ids, list), type(s.input_ids)
assert s.input_ids == [1, 2, 3, 7, 8, 4, 5, 9], s.input_ids
assert s.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
assert s.old_logprobs == [0, 0, 0, -0.5, -0.25, 0, 0, -0.5]
assert s.advantages == [0, 0, 0, 1.5, 1.5, 0, 0, 1.5]
assert list(s.steps) == [0, 1]
# a prompt that does not extend the previous one: two sequences
s1.prompt_prefix = 2
a, c = selroll.to_tensors(b)
assert a.input_ids == [1, 2, 3, 7, 8] and c.input_ids == [1, 2, 4, 5, 9] and c.loss_mask == [0, 0, 0, 0, 1]
print("ok")
"""
    from conftest import py_env
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=py_env(), timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
