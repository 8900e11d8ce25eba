"""selroll.Trainer's rules on the trainer channel, driven by the test as the coordinator (a PUSH
to the Trainer's PULL, a PULL for the acks) over real sockets, plain and with CURVE keys from
`selroll keygen`: duplicates, refusals, stale and foreign batches, garbage, and unauthorised
peers."""
import subprocess

import msgpack
import pytest
import zmq

import selroll
from conftest import free_port
from selroll.curve import Keys


def batch(run="r", iteration=0, version=0, rewards=(1.0, 0.0), **extra):
    adv = selroll.estimator_advantages("grpo", list(rewards))
    trajs = [{"job_id": "j%d" % i, "epoch": 1, "run": run, "group": "g", "task": "t", "traj": i,
              "status": "done", "reward": r, "won": r > 0, "n_steps": 1, "llm_calls": 1,
              "prompt_tokens": 3, "completion_tokens": 2, "wall_ms": 1,
              "steps": [{"i": 0, "action": "a", "raw": "r", "obs": "o", "reward": r, "done": True,
                         "prompt_tokens": 3, "completion_tokens": 2, "format_error": False,
                         "latency_ms": 1.0, "logprob": -0.75,
                         "token_ids": b"\x07\x00\x00\x00\x08\x00\x00\x00",
                         "token_logprobs": bytes.fromhex("000000bf000080be"),
                         "prompt_token_ids": b"\x01\x00\x00\x00\x02\x00\x00\x00",
                         "future_field": 1}]}
             for i, r in enumerate(rewards)]
    m = {"t": "BATCH", "v": 1, "run": run, "iteration": iteration, "policy_version": version,
         "estimator": "grpo", "stats": {"batch_groups": 1.0},
         "groups": [{"group": "g", "task": "t", "weight": 1.0, "audit_weight": 1.0,
                     "rewards": list(rewards), "advantages": adv, "advantages_raw": adv,
                     "trajectories": trajs}]}
    m.update(extra)
    return msgpack.packb(m, use_bin_type=True)


class Coordinator:
    """The test's side: binds the ack PULL (a CURVE server with the coordinator's keys: any valid
    client key gets in, there is no ZAP handler in this context), then connects a PUSH (a CURVE
    client with coordinator.key) to the Trainer's PULL."""

    def __init__(self, keys_dir):
        self.keys = Keys(keys_dir, role="coordinator", bind=True) if keys_dir else None
        self.ctx = zmq.Context()
        self.acks = self.ctx.socket(zmq.PULL)
        self.acks.linger = 0
        if self.keys:
            self.keys.server(self.acks)
        self.ack_ep = "tcp://127.0.0.1:%d" % free_port()
        self.acks.bind(self.ack_ep)
        self.push = None

    def connect(self, pull_ep):
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        if self.keys:
            self.keys.client(self.push)
        self.push.connect(pull_ep)

    def send(self, body):
        self.push.send(body)

    def ack(self, timeout=5.0):
        if not self.acks.poll(int(timeout * 1000)):
            return None
        return msgpack.unpackb(self.acks.recv(), raw=False)

    def close(self):
        for s in (self.push, self.acks):
            if s is not None:
                s.close()
        self.ctx.term()


@pytest.fixture(params=[False, True], ids=["plain", "curve"])
def channel(request, selroll_bin, tmp_path):
    keys_dir = None
    if request.param:
        keys_dir = str(tmp_path / "keys")
        subprocess.run([selroll_bin, "keygen", keys_dir], check=True, capture_output=True)
    pull = "tcp://127.0.0.1:%d" % free_port()
    coord = Coordinator(keys_dir)
    trainer = selroll.Trainer(pull=pull, push=coord.ack_ep, run="r", curve_keys=keys_dir, timeout=5)
    coord.connect(pull)
    yield trainer, coord, keys_dir, pull
    trainer.close()
    coord.close()


def test_the_trainer_channel_rules(channel):
    trainer, coord, keys_dir, pull = channel
    coord.send(b"\xc1 not msgpack")
    coord.send(msgpack.packb({"t": "WEIGHTS_READY", "v": 1}))
    coord.send(batch(iteration=0))
    b = trainer.next_batch(5)
    assert b is not None and (b.run, b.iteration, b.policy_version, b.next_version) == ("r", 0, 0, 1)
    assert trainer.stats["discarded"] == 2
    t = b.groups[0].trajectories[0]
    assert list(t.steps[0].token_ids) == [7, 8] and list(t.steps[0].token_logprobs) == [-0.5, -0.25]
    assert t.steps[0].extra == {"future_field": 1} and t.advantage == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(RuntimeError, match="not answered yet"):
        trainer.next_batch(0.1)
    trainer.refuse("not now")
    a = coord.ack()
    assert a["ok"] is False and a["reason"] == "not now" and a["version"] == 0 and a["iteration"] == 0
    with pytest.raises(RuntimeError, match="no batch to answer"):
        trainer.ack()

    coord.send(batch(iteration=0))                       # the resend after a refusal: yielded again
    b = trainer.next_batch(5)
    assert b.iteration == 0
    seqs = selroll.to_tensors(b)
    assert [int(x) for x in seqs[0].input_ids] == [1, 2, 7, 8]
    assert [int(x) for x in seqs[0].loss_mask] == [0, 0, 1, 1]
    trainer.ack(path="/ckpt/v1", loss=0.25)
    a = coord.ack()
    assert (a["ok"], a["version"], a["path"], a["loss"]) == (True, 1, "/ckpt/v1", 0.25)

    coord.send(batch(iteration=0))                       # sent again (a timeout): acked again,
    coord.send(batch(iteration=1, version=1))            # not yielded
    b = trainer.next_batch(5)
    assert b.iteration == 1
    a = coord.ack()
    assert (a["ok"], a["version"], a["iteration"], a["path"]) == (True, 1, 0, "/ckpt/v1")
    assert "acknowledged already" in a["info"] and "loss" not in a
    trainer.ack()
    assert coord.ack()["version"] == 2

    coord.send(batch(run="other", iteration=2, version=2))   # another run: refused
    coord.send(batch(iteration=0, version=0, rewards=(0.0, 1.0)))  # a new batch of iteration 0?
    # iteration 0 was acked: whatever its groups, it is answered with the same ack
    coord.send(batch(iteration=2, version=2))
    b = trainer.next_batch(5)
    assert b.iteration == 2
    a1, a2 = coord.ack(), coord.ack()
    assert a1["ok"] is False and "run 'other'" in a1["reason"] and a1["version"] == 2
    assert a2["ok"] is True and a2["iteration"] == 0 and a2["version"] == 1
    trainer.ack()
    assert coord.ack()["version"] == 3
    # a BATCH whose groups do not decode: refused with the reason (the coordinator logs it)
    coord.send(msgpack.packb({"t": "BATCH", "v": 1, "run": "r", "iteration": 3, "policy_version": 3,
                              "groups": [{"group": "g", "task": "t"}], "stats": {}}))
    assert trainer.next_batch(0.5) is None
    a = coord.ack()
    assert a["ok"] is False and a["iteration"] == 3 and a["version"] == 3
    assert a["reason"] == "batch refused: groups[0]: 'advantages' missing", a
    assert trainer.stats == {"batches": 8, "acked": 3, "refused": 3, "resent_acked": 2,
                             "stale": 1, "discarded": 2}
    assert trainer.next_batch(0.2) is None

    if keys_dir:
        # A PUSH with a valid key that is not authorised: the Trainer's ZAP handler refuses it.
        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.linger = 0
        pub, sec = zmq.curve_keypair()
        s.curve_publickey, s.curve_secretkey = pub, sec
        s.curve_serverkey = Keys(keys_dir, bind=False).server_public
        s.connect(pull)
        try:
            s.send(batch(iteration=4, version=4), zmq.NOBLOCK)
        except zmq.Again:
            pass
        assert trainer.next_batch(1.0) is None
        assert trainer.auth.refused >= 1
        s.close()
        ctx.term()


def test_advantages_are_checked():
    b = selroll.decode_batch(batch(rewards=(1.0, 0.0, 0.0, 0.0)))
    assert selroll.check_advantages(b) == (1, 0)
    assert b.groups[0].advantages[0] == pytest.approx(1.7320, abs=1e-4)
    assert selroll.estimator_advantages("rloo", [1.0, 0.0, 0.0, 0.0]) == pytest.approx([1, -1 / 3, -1 / 3, -1 / 3])
    assert selroll.estimator_advantages("dr-grpo", [1.0, 0.0, 0.0, 0.0]) == [0.75, -0.25, -0.25, -0.25]
    assert selroll.estimator_advantages("grpo", [1.0, 1.0]) == [0.0, 0.0]
    b.groups[0].advantages[1] += 1e-6
    with pytest.raises(ValueError, match="advantages\\[1\\]"):
        selroll.check_advantages(b)
    with pytest.raises(selroll.ProtocolError, match="iteration: missing"):
        selroll.decode_batch(msgpack.packb({"t": "BATCH", "v": 1, "run": "r"}))
    with pytest.raises(selroll.ProtocolError, match="unsupported version 2"):
        selroll.decode_batch(msgpack.packb({"t": "BATCH", "v": 2}))
