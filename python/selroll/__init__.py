"""selroll from Python: your environment as an env worker, your trainer on selroll's batches.

    import selroll

    class MyEnv(selroll.EnvWorker):            # one instance per session, like a gymnasium Env
        def reset(self, task_id, task_data): ...    # -> obs, admissible, info
        def step(self, action): ...                 # -> obs, reward, done, won, admissible

    MyEnv.serve("tcp://*:5590")                # or: python3 -m selroll.env_worker mod:MyEnv --bind ...

    trainer = selroll.Trainer(pull="tcp://*:5570", push="tcp://coordinator:5571")
    for batch in trainer:                      # typed BATCHes; resends answered for you
        seqs = selroll.to_tensors(batch)       # ids, loss mask, old logprobs, advantages
        ...                                    # your update
        trainer.ack()                          # WEIGHTS_READY: version policy_version + 1

The package depends only on pyzmq and msgpack (numpy optional). Sub-modules are imported on
first use, so `import selroll` stays cheap and needs neither numpy nor torch.
"""

__version__ = "0.1.0"

# The protocol version this package speaks (docs/protocol.md).
PROTOCOL_VERSION = 1

_EXPORTS = {
    "EnvWorker": "env_worker",
    "EnvServer": "env_worker",
    "Trainer": "trainer",
    "Batch": "trainer",
    "Group": "trainer",
    "Trajectory": "trainer",
    "Step": "trainer",
    "TokenSequence": "trainer",
    "to_tensors": "trainer",
    "decode_batch": "trainer",
    "estimator_advantages": "trainer",
    "check_advantages": "trainer",
    "ProtocolError": "protocol",
}

__all__ = ["__version__", "PROTOCOL_VERSION"] + sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError("module 'selroll' has no attribute %r" % name)
    import importlib
    value = getattr(importlib.import_module("." + mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
