"""The package's EnvWorker (tests/games.py) serves real `selroll run` trainings on a task file of
its own: plain and with CURVE, found through --env-endpoints or through the Redis registry, and
SIGTERMed mid-run beside a second worker without losing a trajectory."""
import glob
import json
import os
import re
import signal
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import HELD, TRAIN, free_port, read


def run_selroll(selroll_bin, tmp, args, timeout=120):
    out = os.path.join(tmp, "out")
    t0 = time.monotonic()
    p = subprocess.run([selroll_bin, "run", "--out", out, "--http", "off", "--grace-ms", "1000"] + args,
                       capture_output=True, text=True, timeout=timeout, cwd=tmp)
    p.took = time.monotonic() - t0
    p.dir = out
    return p


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def iterations(out):
    return [o for o in jsonl(os.path.join(out, "iterations.jsonl")) if o.get("type") == "iteration"]


def round_results(out):
    res = []
    for p in sorted(glob.glob(os.path.join(out, "rounds", "round-*.jsonl"))):
        res += jsonl(p)
    return res


def summary(log):
    """The counters of the worker's last line: {"resets": n, ..., "errors": {code: n}}."""
    m = re.search(r"(\d+) requests, (\d+) resets, (\d+) steps, (\d+) closes, .* "
                  r"(\d+) CURVE refusals, (\d+) errors \(([^)]*)\)", log)
    assert m, "no summary line in the worker's log:\n" + log[-2000:]
    errs = dict((k, int(v)) for k, v in (kv.split("=") for kv in m.group(7).split()))
    return {"requests": int(m.group(1)), "resets": int(m.group(2)), "steps": int(m.group(3)),
            "closes": int(m.group(4)), "curve_refused": int(m.group(5)), "errors": errs}


def stop(p, timeout=10):
    p.send_signal(signal.SIGTERM)
    return p.wait(timeout)


TRAIN_ARGS = ["--iters", "2", "--actors", "1", "--slots", "8", "--group-size", "4",
              "--batch-groups", "2", "--eval-every", "0", "--max-steps", "6"]


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_env_worker_serves_a_training_run(selroll_bin, procs, tmp_path, task_files, curve):
    train, held, tmpl = task_files
    tmp = str(tmp_path)
    log = os.path.join(tmp, "resets.jsonl")
    env = dict(os.environ, GAMES_LOG=log)
    from conftest import py_env
    env = dict(py_env(), GAMES_LOG=log)
    port = free_port()
    extra, run_extra = [], []
    if curve:
        keys = os.path.join(tmp, "keys")
        subprocess.run([selroll_bin, "keygen", keys], check=True, capture_output=True)
        extra = ["--curve-keys", keys]
        run_extra = ["--curve-keys", keys]
    w = procs.env_worker("worker", port, *extra, env=env)
    ep = "tcp://127.0.0.1:%d" % port

    if curve:
        # Before the run: a client with a valid key that is not authorised is refused by the
        # worker's ZAP handler, and a client without CURVE gets nothing either.
        ctx = zmq.Context()
        for client_keys in (zmq.curve_keypair(), None):
            d = ctx.socket(zmq.DEALER)
            d.linger = 0
            if client_keys:
                pub, sec = client_keys
                d.curve_publickey, d.curve_secretkey = pub, sec
                with open(os.path.join(keys, "server.pub")) as f:
                    d.curve_serverkey = [ln for ln in f.read().split() if not ln.startswith("#")][-1].encode()
            d.connect(ep)
            d.send(msgpack.packb({"t": "RESET", "v": 1, "rid": 1, "session": "s", "task": "copy-amber",
                                  "task_data": TRAIN[0]}))
            assert not d.poll(700), "an unauthorised client got an answer"
            d.close()
        ctx.term()

    p = run_selroll(selroll_bin, tmp, ["--run", "py", "--tasks-file", "train=%s,valid_unseen=%s" % (train, held),
                                       "--env-endpoints", "games=" + ep, "--actor-args", "--template " + tmpl]
                    + TRAIN_ARGS + run_extra)
    assert p.returncode == 0, "selroll run exited %d after %.0f s:\n%s" % (p.returncode, p.took, p.stderr[-3000:])
    its = iterations(p.dir)
    assert len(its) == 2 and its[-1]["policy_version_after"] == 2
    assert all(i["trajectories_failed"] == 0 for i in its)

    resets = jsonl(log)
    files = {o["id"]: dict(o, env="games") for o in TRAIN + HELD}
    assert resets, "no RESET reached the Python env worker"
    assert all(r["task_data"] == files[r["task"]] for r in resets), "a RESET's task_data is not its line"
    assert {o["id"] for o in HELD} <= {r["task"] for r in resets}, "held-out tasks not played"
    assert all(r["max_steps"] == 6 and isinstance(r["seed"], int) for r in resets)
    results = round_results(p.dir)
    assert results and all(r["status"] in ("done", "truncated") for r in results)
    assert any(r["won"] for r in results) and any(s["obs"] == "That is it. You win."
                                                  for r in results for s in r["steps"])

    assert stop(w) == 0
    st = summary(read(w.log))
    assert st["resets"] == len(resets) and st["steps"] == sum(r["n_steps"] for r in results)
    assert st["closes"] == st["resets"], "every session was closed by its actor"
    assert sum(st["errors"].values()) == 0
    if curve:
        assert st["curve_refused"] >= 1
        assert "curve: refused a peer" in read(w.log)


def test_sigterm_mid_run_loses_no_trajectory(selroll_bin, procs, tmp_path, task_files):
    """Two workers serve a run; one is SIGTERMed mid-run. It stops cleanly (exit 0, sessions
    closed); the actor reports the episodes it cut short as failed attempts naming it, and the
    coordinator re-runs them at the other worker: every iteration completes, no trajectory fails."""
    train, held, tmpl = task_files
    tmp = str(tmp_path)
    from conftest import py_env
    pa, pb = free_port(), free_port()
    la, lb = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
    a = procs.env_worker("worker-a", pa, "--grace", "1", env=dict(py_env(), GAMES_LOG=la))
    b = procs.env_worker("worker-b", pb, env=dict(py_env(), GAMES_LOG=lb))
    args = [selroll_bin, "run", "--out", os.path.join(tmp, "out"), "--http", "off", "--grace-ms", "1000",
            "--run", "kill", "--tasks-file", "train=%s,valid_unseen=%s" % (train, held),
            "--env-endpoints", "games=tcp://127.0.0.1:%d,games=tcp://127.0.0.1:%d" % (pa, pb),
            "--actor-args", "--template " + tmpl, "--iters", "3", "--actors", "1", "--slots", "8",
            "--group-size", "4", "--batch-groups", "2", "--eval-every", "0", "--max-steps", "8",
            "--time-scale", "5"]
    run = procs.start(args, "run")
    # Mid-run: once worker a has served a few RESETs and holds open sessions.
    end = time.monotonic() + 60
    while time.monotonic() < end and run.poll() is None:
        if os.path.exists(la) and len(read(la).splitlines()) >= 6:
            break
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before worker a was stopped:\n" + read(run.log)[-2000:]
    t0 = time.monotonic()
    assert stop(a) == 0
    took = time.monotonic() - t0
    alog = read(a.log)
    assert "stopping:" in alog and took < 5, "worker a took %.1f s to stop:\n%s" % (took, alog)
    run.wait(120)
    assert run.returncode == 0, "the run exited %d:\n%s" % (run.returncode, read(run.log)[-3000:])
    out = os.path.join(tmp, "out")
    its = iterations(out)
    assert len(its) == 3, "iterations: %d" % len(its)
    assert all(i["trajectories_failed"] == 0 for i in its), "a trajectory was lost"
    # The run reports it: attempts cut short at worker a, named, each re-run to its end.
    actor_log = "".join(read(p) for p in glob.glob(os.path.join(out, "logs", "actor-*.log")))
    cut = [ln for ln in actor_log.splitlines() if "env worker tcp://127.0.0.1:%d" % pa in ln and "failed" in ln]
    assert cut, "the actor's log names no episode cut short at worker a"
    results = round_results(out)
    jobs = {}
    for r in results:
        jobs.setdefault(r["job_id"], []).append(r["status"])
    assert all(any(s in ("done", "truncated") for s in sts) for sts in jobs.values())
    # worker b took over: it played RESETs after a stopped
    assert len(read(lb).splitlines()) > 0
    st = summary(alog)
    assert st["resets"] == len(read(la).splitlines())
    assert re.search(r"\d+ sessions held", alog)


def test_found_through_the_registry(selroll_bin, procs, redis, tmp_path, task_files):
    """No list of env workers anywhere: the Python worker registers in Redis with its class's
    kind (games), the coordinator names it to the actor in WELCOME, and it serves the round.
    (`selroll run` gives its actors their env workers by hand, so this is the coordinator, the
    policy server and an actor started one by one, as on a cluster.)"""
    train, held, tmpl = task_files
    tmp = str(tmp_path)
    from conftest import py_env, wait_port
    log = os.path.join(tmp, "resets.jsonl")
    port, wport, pport = free_port(), free_port(), free_port()
    w = procs.env_worker("worker", port, "--redis", redis.url, "--run", "reg", "--id", "py-1",
                         env=dict(py_env(), GAMES_LOG=log))
    end = time.monotonic() + 5
    while time.monotonic() < end and redis.cli("exists", "selroll:reg:envw:py-1") != "1":
        time.sleep(0.05)
    assert redis.cli("hget", "selroll:reg:envw:py-1", "kind") == "games"
    procs.start([selroll_bin, "policy-server", "--listen", "127.0.0.1:%d" % pport,
                 "--time-scale", "50"], "policy")
    assert wait_port(pport)
    out = os.path.join(tmp, "out")
    coord = procs.start([selroll_bin, "coordinator", "--redis", redis.url, "--run", "reg",
                         "--work-bind", "tcp://127.0.0.1:%d" % wport,
                         "--bus-pub-bind", "tcp://127.0.0.1:%d" % free_port(),
                         "--bus-sub-bind", "tcp://127.0.0.1:%d" % free_port(), "--http", "off",
                         "--groups", "4", "--iters", "1", "--tasks", "4", "--group-size", "2",
                         "--max-steps", "4", "--tasks-file", "train=" + train, "--out", out],
                        "coordinator")
    actor = procs.start([selroll_bin, "actor", "--coordinator", "tcp://127.0.0.1:%d" % wport,
                         "--id", "reg-actor", "--slots", "8", "--template", tmpl,
                         "--policy", "http://127.0.0.1:%d" % pport], "actor")
    assert coord.wait(60) == 0, read(coord.log)[-2000:]
    st = subprocess.run([selroll_bin, "status", "--redis", redis.url, "--run", "reg"],
                        capture_output=True, text=True).stdout
    assert re.search(r"py-1 .*kind games", st), st
    alog = read(actor.log)
    assert "env worker tcp://127.0.0.1:%d (games)" % port in alog, alog[-2000:]
    results = round_results(out)
    assert len(results) == 8 and all(r["status"] in ("done", "truncated") for r in results)
    assert len(jsonl(log)) == 8, "every RESET reached the Python worker"
    assert stop(w) == 0
    assert redis.cli("exists", "selroll:reg:envw:py-1") == "0"
