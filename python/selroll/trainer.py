"""Your trainer on selroll's batches: the trainer channel of docs/protocol.md.

    trainer = selroll.Trainer(pull="tcp://*:5570", push="tcp://127.0.0.1:5571")
    for batch in trainer:                       # one Batch per iteration
        if not usable(batch):
            trainer.refuse("why")               # WEIGHTS_READY ok false; the coordinator resends once
            continue
        for seq in selroll.to_tensors(batch):   # per trajectory: ids, loss mask, old logprobs, advantages
            ...
        trainer.ack(path="/ckpt/v%d" % batch.next_version)   # ok true, version policy_version + 1

The coordinator PUSHes each BATCH to `pull` (bound here) and reads WEIGHTS_READY on its PULL
(`push` connects there). `Trainer` follows the channel's rules for you:

- a BATCH of a (run, iteration) acked with ok true already (the coordinator's resend after
  ``--weights-timeout-ms``, or a restarted coordinator) is not yielded again: it is answered at once
  with the same ack (ok true, same version and path);
- a BATCH that was refused comes back once: it is yielded again, to be acked or refused;
- a BATCH of an iteration older than the last one acked (never acked itself) is stale: refused
  with the reason, not yielded; a BATCH of another run than `run` (when given) likewise;
- a BATCH whose groups do not decode is refused, the reason naming the field;
- bytes that are not a BATCH are dropped, logged and counted (`stats["discarded"]`): there is no
  run or iteration to answer.
"""
import array
import dataclasses
import logging
import math
import sys
import typing

import msgpack
import zmq

from . import protocol

log = logging.getLogger("selroll.trainer")


# ---- the batch as typed objects ------------------------------------------------------------

def _words(code, b):
    """A step's binary of little-endian 32-bit words -> array(code): 'i' ints, 'f' floats."""
    if b is None:
        return None
    a = array.array(code)
    a.frombytes(bytes(b))
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _ints(b):
    return _words("i", b)


def _floats(b):
    return _words("f", b)


@dataclasses.dataclass
class Step:
    """One step of a trajectory (docs/protocol.md, RESULT, "A step map")."""
    i: int
    action: str
    raw: str
    obs: str
    reward: float
    done: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    format_error: bool = False
    latency_ms: float = 0.0
    logprob: typing.Optional[float] = None
    messages: list = dataclasses.field(default_factory=list)   # [{"role", "content"}]
    reasoning: typing.Optional[str] = None
    token_ids: typing.Optional[array.array] = None          # completion ids, array('i')
    token_logprobs: typing.Optional[array.array] = None     # their old logprobs, array('f')
    prompt_token_ids: typing.Optional[array.array] = None   # --tokens full: after prompt_prefix
    prompt_prefix: typing.Optional[int] = None
    tokens_mismatch: bool = False
    served_version: typing.Optional[int] = None
    extra: dict = dataclasses.field(default_factory=dict, repr=False)  # every other field

    _FIELDS = ("i", "action", "raw", "obs", "reward", "done", "prompt_tokens", "completion_tokens",
               "format_error", "latency_ms", "logprob", "messages", "reasoning", "prompt_prefix",
               "tokens_mismatch", "served_version")

    @classmethod
    def from_map(cls, m):
        kw = {k: m[k] for k in cls._FIELDS if m.get(k) is not None}
        kw["token_ids"] = _ints(m.get("token_ids"))
        kw["token_logprobs"] = _floats(m.get("token_logprobs"))
        kw["prompt_token_ids"] = _ints(m.get("prompt_token_ids"))
        known = set(cls._FIELDS) | {"token_ids", "token_logprobs", "prompt_token_ids"}
        kw["extra"] = {k: v for k, v in m.items() if k not in known}
        return cls(**kw)


@dataclasses.dataclass
class Trajectory:
    """One trajectory (a RESULT body) with its advantage in the group."""
    job_id: str
    group: str
    task: str
    traj: int
    status: str
    reward: float
    won: bool
    n_steps: int
    steps: typing.List[Step]
    advantage: float = 0.0      # advantages[traj] x the group's weight: every trained token's
    run: str = ""
    epoch: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_ms: int = 0
    error: typing.Optional[str] = None
    extra: dict = dataclasses.field(default_factory=dict, repr=False)

    _FIELDS = ("job_id", "group", "task", "traj", "status", "reward", "won", "n_steps", "run",
               "epoch", "llm_calls", "prompt_tokens", "completion_tokens", "wall_ms", "error")

    @classmethod
    def from_map(cls, m, advantage):
        kw = {k: m[k] for k in cls._FIELDS if m.get(k) is not None}
        kw["steps"] = [Step.from_map(s) for s in m.get("steps") or []]
        kw["advantage"] = advantage
        kw["extra"] = {k: v for k, v in m.items() if k not in cls._FIELDS and k != "steps"}
        return cls(**kw)

    def prompts(self):
        """Each step's whole prompt ids (``--tokens full``), rebuilt as docs/protocol.md says
        ("Rebuilding a prompt"); None for a step without prompt ids."""
        out, prev = [], None
        for s in self.steps:
            if s.prompt_token_ids is None:
                out.append(None)
                prev = None
                continue
            if s.prompt_prefix and prev is not None:
                full = prev[:s.prompt_prefix] + s.prompt_token_ids
            else:
                full = array.array("i", s.prompt_token_ids)
            out.append(full)
            prev = full + (s.token_ids if s.token_ids is not None else array.array("i"))
        return out


@dataclasses.dataclass
class Group:
    """One group of a BATCH: G trajectories of one task with their rewards and advantages."""
    group: str
    task: str
    rewards: typing.List[float]
    advantages: typing.List[float]        # what the loss uses (the audit weight is in them)
    advantages_raw: typing.List[float]    # the estimator's, before the audit weight
    trajectories: typing.List[Trajectory]
    weight: float = 1.0
    audit_weight: float = 1.0
    extra: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_map(cls, m):
        adv = [float(a) for a in m["advantages"]]
        w = float(m.get("weight", 1.0) if m.get("weight") is not None else 1.0)
        aw = m.get("audit_weight")
        raw = m.get("advantages_raw")
        trajs = [Trajectory.from_map(t, (adv[i] if i < len(adv) else 0.0) * w)
                 for i, t in enumerate(m["trajectories"])]
        known = ("group", "task", "rewards", "advantages", "advantages_raw", "trajectories",
                 "weight", "audit_weight")
        return cls(group=m["group"], task=m["task"], rewards=[float(r) for r in m["rewards"]],
                   advantages=adv, advantages_raw=[float(a) for a in raw] if raw is not None else adv,
                   trajectories=trajs, weight=w, audit_weight=float(aw) if aw is not None else 1.0,
                   extra={k: v for k, v in m.items() if k not in known})


@dataclasses.dataclass
class Batch:
    """One iteration's BATCH (docs/protocol.md, BATCH; docs/training.md, "Batch contents")."""
    run: str
    iteration: int
    policy_version: int
    estimator: str
    groups: typing.List[Group]
    stats: typing.Dict[str, float]
    extra: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def next_version(self):
        """The version an ok ack names: policy_version + 1."""
        return self.policy_version + 1

    @property
    def trajectories(self):
        return [t for g in self.groups for t in g.trajectories]

    def __len__(self):
        return len(self.groups)


def decode_batch(body):
    """BATCH bytes (or the decoded map) -> Batch. Raises ProtocolError for anything else."""
    m = protocol.unpack(body) if isinstance(body, (bytes, bytearray, memoryview)) else body
    if not isinstance(m, dict):
        raise protocol.ProtocolError("not a map")
    t = protocol.header(m)
    if t != "BATCH":
        raise protocol.ProtocolError("a %s, not a BATCH" % t, code="unknown_type")
    run = protocol.check_str(m, "run", protocol.MAX_ID)
    it = protocol.check_int(m, "iteration", 0, (1 << 63) - 1)
    pv = protocol.check_int(m, "policy_version", 0, (1 << 63) - 1)
    groups = m.get("groups")
    try:
        if not isinstance(groups, list):
            raise ValueError("missing" if groups is None else "not an array")
        gs = []
        for i, g in enumerate(groups):
            try:
                gs.append(Group.from_map(g))
            except KeyError as e:
                raise ValueError("[%d]: %s missing" % (i, e)) from None
            except (TypeError, ValueError, AttributeError) as e:
                raise ValueError("[%d]: %s" % (i, e)) from None
    except ValueError as e:
        err = protocol.ProtocolError("groups%s%s" % ("" if str(e).startswith("[") else ": ", e))
        err.run, err.iteration, err.policy_version = run, it, pv   # a BATCH to refuse, not drop
        raise err from None
    known = ("t", "v", "run", "iteration", "policy_version", "estimator", "groups", "stats")
    return Batch(run=run, iteration=it, policy_version=pv,
                 estimator=m.get("estimator") or "grpo", groups=gs,
                 stats=dict(m.get("stats") or {}),
                 extra={k: v for k, v in m.items() if k not in known})


# ---- advantages, as the coordinator computes them ----------------------------------------------

def estimator_advantages(estimator, rewards):
    """The advantages of a group's rewards before the audit weight (docs/training.md,
    "Advantages"), in the coordinator's order of operations, so they agree to the last bit or
    nearly: grpo (r - mean) / (std + 1e-6), rloo r - mean of the others, dr-grpo r - mean; all
    exactly 0.0 for a group of one or of equal rewards (within 1e-9)."""
    n = len(rewards)
    if n <= 1 or all(abs(r - rewards[0]) <= 1e-9 for r in rewards):
        return [0.0] * n
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
    """Checks every group: advantages_raw follow from the rewards with the batch's estimator, and
    advantages = advantages_raw x audit_weight. Raises ValueError naming the first that does not;
    returns (groups checked, groups with an audit weight other than 1)."""
    audited = 0
    for i, g in enumerate(batch.groups):
        if g.audit_weight != 1.0:
            audited += 1
        if not len(g.rewards) == len(g.advantages) == len(g.advantages_raw) == len(g.trajectories):
            raise ValueError("groups[%d]: %d rewards, %d advantages, %d advantages_raw, %d "
                             "trajectories" % (i, len(g.rewards), len(g.advantages),
                                               len(g.advantages_raw), len(g.trajectories)))
        want = estimator_advantages(batch.estimator, g.rewards)
        for k, (a, r, e) in enumerate(zip(g.advantages, g.advantages_raw, want)):
            if abs(r - e) > 1e-9 * max(1.0, abs(e)):
                raise ValueError("groups[%d].advantages_raw[%d] is %r, %s of the rewards gives %r"
                                 % (i, k, r, batch.estimator, e))
            if abs(a - r * g.audit_weight) > 1e-12 * max(1.0, abs(a)):
                raise ValueError("groups[%d].advantages[%d] is %r, not advantages_raw x "
                                 "audit_weight = %r" % (i, k, a, r * g.audit_weight))
    return len(batch.groups), audited


# ---- the channel -----------------------------------------------------------------------------

class Trainer:
    """The trainer's end of the trainer channel. Iterate it for Batches; answer each with `ack`
    or `refuse` before asking for the next.

    pull        endpoint bound for BATCHes (the coordinator's PUSH connects; ``tcp://*:5570``)
    push        endpoint of the coordinator's PULL for WEIGHTS_READY (connected)
    run         accept batches of this run only (others refused)
    curve_keys  a `selroll keygen` folder: the PULL is a CURVE server admitting the authorised
                keys (its own ZAP handler), the PUSH a client with trainer.key (or client.key)
    timeout     seconds `next()` waits for a batch (None = forever; then StopIteration)
    """

    def __init__(self, pull="tcp://*:5570", push="tcp://127.0.0.1:5571", run=None,
                 curve_keys=None, curve_authorized=None, timeout=None, context=None):
        self.run = run
        self.timeout = timeout
        self.stats = {"batches": 0, "acked": 0, "refused": 0, "resent_acked": 0, "stale": 0,
                      "discarded": 0}
        self.version = None                 # the latest version acked
        self._acks = {}                     # (run, iteration) -> the ok ack sent
        self._last_acked = {}               # run -> the latest iteration acked ok
        self._current = None                # the Batch yielded and not answered yet
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        self.auth = None
        self.pull = self.push_sock = None
        try:
            keys = None
            if curve_keys:
                from .curve import Authenticator, Keys
                keys = Keys(curve_keys, role="trainer", authorized=curve_authorized, bind=True)
                self.auth = Authenticator(self.ctx, keys.authorized).start()
            self.pull = self.ctx.socket(zmq.PULL)
            self.pull.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE)
            self.pull.linger = 0
            if keys:
                keys.server(self.pull)
            self.pull.bind(pull)
            self.endpoint = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
            self.push_sock = self.ctx.socket(zmq.PUSH)
            self.push_sock.linger = 2000
            if keys:
                keys.client(self.push_sock)
            self.push_sock.connect(push)
        except BaseException:
            self.close()
            raise

    # iteration
    def __iter__(self):
        return self

    def __next__(self):
        b = self.next_batch(self.timeout)
        if b is None:
            raise StopIteration
        return b

    def next_batch(self, timeout=None):
        """The next Batch to train, or None after `timeout` seconds without one."""
        if self._current is not None:
            raise RuntimeError("iteration %d of run %s is not answered yet: call ack() or "
                               "refuse() first" % (self._current.iteration, self._current.run))
        while True:
            if timeout is not None and not self.pull.poll(int(timeout * 1000)):
                return None
            body = self.pull.recv()
            try:
                b = decode_batch(body)
            except protocol.ProtocolError as e:
                if getattr(e, "run", None) is not None and (e.run, e.iteration) not in self._acks:
                    # a BATCH whose groups do not decode: refused, so the coordinator says why
                    self.stats["batches"] += 1
                    self._refuse(Batch(run=e.run, iteration=e.iteration,
                                       policy_version=e.policy_version, estimator="", groups=[],
                                       stats={}), "batch refused: %s" % e)
                    continue
                self.stats["discarded"] += 1
                log.warning("discarded a message of %d bytes: %s", len(body), e)
                continue
            self.stats["batches"] += 1
            key = (b.run, b.iteration)
            if key in self._acks:
                self.stats["resent_acked"] += 1
                ack = dict(self._acks[key])
                ack["info"] = ("iteration %d acknowledged already: version %d (a batch sent again)"
                               % (b.iteration, ack["version"]))
                ack.pop("loss", None)
                self._send(ack)
                log.info("iteration %d of run %s again: acked again with version %d",
                         b.iteration, b.run, ack["version"])
                continue
            reason = None
            if self.run is not None and b.run != self.run:
                reason = "a batch of run %r; this trainer serves run %r" % (b.run, self.run)
            elif b.run in self._last_acked and b.iteration < self._last_acked[b.run]:
                reason = ("iteration %d is older than iteration %d, trained already (a stale batch)"
                          % (b.iteration, self._last_acked[b.run]))
            if reason:
                self.stats["stale"] += 1
                self._refuse(b, reason)
                continue
            self._current = b
            return b

    # answers
    def ack(self, version=None, path=None, loss=None, info=None):
        """Answers the current batch: trained, the weights of `version` (default
        policy_version + 1) are published (at `path`, for the coordinator's --weights-sync)."""
        b = self._take("ack")
        version = b.next_version if version is None else int(version)
        ack = {"t": "WEIGHTS_READY", "v": protocol.VERSION, "run": b.run,
               "iteration": b.iteration, "version": version, "ok": True}
        if path is not None:
            ack["path"] = str(path)
        if loss is not None:
            ack["loss"] = float(loss)
        if info is not None:
            ack["info"] = str(info)[:protocol.MAX_TEXT // 2]
        self._acks[(b.run, b.iteration)] = ack
        self._last_acked[b.run] = max(b.iteration, self._last_acked.get(b.run, -1))
        self.version = version
        self.stats["acked"] += 1
        self._send(ack)

    def refuse(self, reason):
        """Refuses the current batch (ok false, the version unchanged); the coordinator sends it
        once more, and stops the run on a second refusal."""
        b = self._take("refuse")
        self._refuse(b, reason)

    def _refuse(self, b, reason):
        reason = str(reason)[:protocol.MAX_SHORT - 1]
        version = self.version if self.version is not None else b.policy_version
        self.stats["refused"] += 1
        log.info("iteration %d of run %s refused: %s", b.iteration, b.run, reason)
        self._send({"t": "WEIGHTS_READY", "v": protocol.VERSION, "run": b.run,
                    "iteration": b.iteration, "version": version, "ok": False,
                    "reason": reason, "info": "refused: " + reason})

    def _take(self, what):
        if self._current is None:
            raise RuntimeError("%s(): no batch to answer" % what)
        b, self._current = self._current, None
        return b

    def _send(self, m):
        self.push_sock.send(msgpack.packb(m, use_bin_type=True))

    def close(self):
        for s in (self.pull, self.push_sock):
            if s is not None:
                s.close()
        self.pull = self.push_sock = None
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
        if self._own_ctx and self.ctx is not None:
            self.ctx.term()
            self.ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- tokens to tensors ---------------------------------------------------------------------

@dataclasses.dataclass
class TokenSequence:
    """One training sequence (docs/training.md, "Token-level trainers"): a trajectory's turns
    concatenated, or one step alone when the next prompt does not extend the previous one.

    input_ids      prompt of the first step, then per step its completion and the observation /
                   template tokens leading to the next step's prompt
    loss_mask      1 on completion tokens, 0 on prompt, observation and template tokens
    old_logprobs   the sampling policy's logprob at each completion token, 0.0 elsewhere
    advantages     the trajectory's advantage (advantages[i] x weight) on completion tokens,
                   0.0 elsewhere
    numpy arrays (int64, int64, float32, float32) when numpy is importable, else lists.
    """
    group: int          # index of the group in batch.groups
    traj: int           # index of the trajectory in the group
    steps: range        # the trajectory's steps this sequence covers
    input_ids: typing.Any
    loss_mask: typing.Any
    old_logprobs: typing.Any
    advantages: typing.Any


def to_tensors(batch, strict=False, require_prompt=True):
    """The Batch's trajectories as TokenSequences (a list), in group and trajectory order.

    Needs the steps' token ids (actors with ``--tokens full``; with ``completion`` pass
    ``require_prompt=False`` to get each step's completion alone, masked 1). strict=True leaves
    out the trajectories with a step flagged tokens_mismatch. A step without token_ids raises
    ValueError (it cannot be trained token-exactly)."""
    try:
        import numpy as np
    except ImportError:
        np = None
    out = []
    for gi, g in enumerate(batch.groups):
        for ti, t in enumerate(g.trajectories):
            if strict and any(s.tokens_mismatch for s in t.steps):
                continue
            out.extend(_trajectory_sequences(gi, ti, t, require_prompt))
    if np is not None:
        for s in out:
            s.input_ids = np.asarray(s.input_ids, dtype=np.int64)
            s.loss_mask = np.asarray(s.loss_mask, dtype=np.int64)
            s.old_logprobs = np.asarray(s.old_logprobs, dtype=np.float32)
            s.advantages = np.asarray(s.advantages, dtype=np.float32)
    return out


def _trajectory_sequences(gi, ti, t, require_prompt):
    where = "group %d trajectory %d" % (gi, ti)
    for s in t.steps:
        if s.token_ids is None or s.token_logprobs is None:
            raise ValueError("%s step %d has no token ids (run the actors with --tokens full)"
                             % (where, s.i))
        if len(s.token_ids) != len(s.token_logprobs):
            raise ValueError("%s step %d: %d ids but %d logprobs"
                             % (where, s.i, len(s.token_ids), len(s.token_logprobs)))
        if require_prompt and s.prompt_token_ids is None:
            raise ValueError("%s step %d has no prompt ids (run the actors with --tokens full, "
                             "or pass require_prompt=False)" % (where, s.i))
    prompts = t.prompts() if require_prompt else [None] * len(t.steps)
    adv = float(t.advantage)
    seqs = []
    cur = None   # [first step, ids, mask, logprobs, advantages, prompt+completion so far]
    for k, s in enumerate(t.steps):
        comp = list(s.token_ids)
        lps = list(s.token_logprobs)
        full = list(prompts[k]) if prompts[k] is not None else []
        if cur is not None and s.prompt_prefix is not None and \
                s.prompt_prefix == len(cur[5]) and full[:len(cur[5])] == cur[5]:
            bridge = full[len(cur[5]):]   # observation and template tokens since the completion
        else:
            if cur is not None:
                seqs.append(cur)
            cur = [k, [], [], [], [], []]
            bridge = full
        cur[1] += bridge + comp
        cur[2] += [0] * len(bridge) + [1] * len(comp)
        cur[3] += [0.0] * len(bridge) + lps
        cur[4] += [0.0] * len(bridge) + [adv] * len(comp)
        cur[5] = full + comp
    if cur is not None:
        seqs.append(cur)
    out = []
    for i, c in enumerate(seqs):
        end = seqs[i + 1][0] if i + 1 < len(seqs) else len(t.steps)
        out.append(TokenSequence(group=gi, traj=ti, steps=range(c[0], end), input_ids=c[1],
                                 loss_mask=c[2], old_logprobs=c[3], advantages=c[4]))
    return out
