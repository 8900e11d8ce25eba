"""The neural agent's server in vLLM's shapes, over real HTTP to a real server process with a tiny
random model: ids, logprobs, seeds, greedy decoding, errors, batching, disconnects, weight updates."""
import json
import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from neural_util import ServerProc, messages, tiny_checkpoint  # noqa: E402
from selroll.neural import checkpoint, prompt  # noqa: E402


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    d = tmp_path_factory.mktemp("neural")
    return tiny_checkpoint(str(d / "a.pt"), seed=0, n_ctx=4096), tiny_checkpoint(str(d / "b.pt"), seed=1, n_ctx=4096)


@pytest.fixture(scope="module")
def server(weights, tmp_path_factory):
    s = ServerProc(weights[0], tmp_path_factory.mktemp("srv"), ["--max-batch", "32"])
    yield s
    s.close()


def _reference_logprobs(weights_path, prompt_ids, out_ids):
    """Teacher-forced log-probabilities of out_ids after prompt_ids, one full forward pass."""
    model, _, _ = checkpoint.load(weights_path)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + out_ids]))
    lp = torch.log_softmax(logits[0], dim=-1)
    n = len(prompt_ids)
    return [float(lp[n - 1 + j, t]) for j, t in enumerate(out_ids)]


def test_answer_in_vllm_shape_ids_decode_to_text_and_logprobs_match(server, weights):
    _, tok, _ = checkpoint.load(weights[0])
    body = {"model": "selroll-neural", "messages": messages(), "temperature": 1.0, "top_p": 0.95,
            "max_tokens": 12, "seed": 11, "logprobs": True, "return_token_ids": True}
    st, r = server.chat(body)
    assert st == 200, r
    assert r["object"] == "chat.completion" and r["model"] == "selroll-neural"
    ch = r["choices"][0]
    ids, pids = ch["token_ids"], r["prompt_token_ids"]
    assert pids == tok.encode(prompt.chat_text(messages())), "the model sees exactly the request's messages"
    assert tok.decode(ids) == ch["message"]["content"]
    assert r["usage"] == {"prompt_tokens": len(pids), "completion_tokens": len(ids),
                          "total_tokens": len(pids) + len(ids)}
    assert ch["finish_reason"] in ("stop", "length")
    lps = [c["logprob"] for c in ch["logprobs"]["content"]]
    assert len(lps) == len(ids) and all(lp <= 0 for lp in lps)
    assert [c["token"] for c in ch["logprobs"]["content"]] == [tok.token_text(i) for i in ids]
    ref = _reference_logprobs(weights[0], pids, ids)
    assert sum(lps) == pytest.approx(sum(ref), abs=1e-3)
    for a, b in zip(lps, ref):
        assert a == pytest.approx(b, abs=1e-4)
    # OpenAI's text content parts are the same text
    parts = [{"role": m["role"], "content": [{"type": "text", "text": m["content"][:10]},
                                             {"type": "text", "text": m["content"][10:]}]} for m in messages()]
    st, r3 = server.chat(dict(body, messages=parts))
    assert st == 200 and r3["prompt_token_ids"] == pids and r3["choices"][0]["token_ids"] == ids
    # return_prompt_token_ids false (what selroll's actor sends with --tokens completion)
    st, r2 = server.chat(dict(body, return_prompt_token_ids=False))
    assert st == 200 and r2["prompt_token_ids"] is None and r2["choices"][0]["token_ids"] == ids


def test_same_seed_same_answer_and_temperature_zero_is_greedy(server, weights):
    body = {"messages": messages(1), "temperature": 1.0, "max_tokens": 16, "return_token_ids": True}
    a = [server.chat(dict(body, seed=7))[1]["choices"][0]["token_ids"] for _ in range(3)]
    assert a[0] == a[1] == a[2]
    others = [server.chat(dict(body, seed=s))[1]["choices"][0]["token_ids"] for s in range(20, 26)]
    assert any(o != a[0] for o in others), "different seeds sample different answers"
    st, g = server.chat(dict(body, temperature=0, seed=123))
    ids = g["choices"][0]["token_ids"]
    model, tok, _ = checkpoint.load(weights[0])
    seq = tok.encode(prompt.chat_text(messages(1)))
    want = []
    with torch.no_grad():
        for _ in range(len(ids)):
            t = int(torch.argmax(model(torch.tensor([seq]))[0, -1]))
            want.append(t)
            seq.append(t)
            if t == 0:
                break
    assert ids == want
    st, g2 = server.chat(dict(body, temperature=0, seed=999))
    assert g2["choices"][0]["token_ids"] == ids


@pytest.mark.parametrize("body,status,text", [
    (b"{not json", 400, "invalid JSON"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, 400, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "seed": 1.5}, 400, "seed"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}, 400, "maximum context length"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n must be 1"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
])
def test_bad_requests_get_vllm_error_bodies(server, body, status, text):
    st, r = server.chat(body)
    assert st == status
    assert r["object"] == "error" and r["code"] == status and text in r["message"]
    assert r["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_models_and_health(server):
    st, r = server.request("GET", "/v1/models")
    assert st == 200 and [m["id"] for m in r["data"]] == ["selroll-neural", "selroll-neural-v0"]
    assert server.request("GET", "/health")[0] == 200


def test_concurrent_requests_share_forward_passes(server):
    before = server.metrics()
    results = [None] * 16
    go = threading.Barrier(16)

    def one(i):
        go.wait()
        results[i] = server.chat({"messages": messages(i), "temperature": 1.0, "seed": i, "max_tokens": 40,
                                  "ignore_eos": True, "return_token_ids": True})

    ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(st == 200 and len(r["choices"][0]["token_ids"]) == 40 for st, r in results)
    after = server.metrics()
    passes = after["forward_passes"] - before["forward_passes"]
    tokens = after["tokens_generated"] - before["tokens_generated"]
    assert tokens == 16 * 40
    # One at a time would take 16 * 40 passes; batched, each decode pass serves many requests.
    assert passes < tokens / 3, (passes, tokens)
    assert after["decode_rows"] - before["decode_rows"] > 3 * (after["decode_passes"] - before["decode_passes"])


def test_disconnected_request_stops_generating(server):
    before = server.metrics()
    body = json.dumps({"messages": messages(2), "temperature": 1.0, "seed": 3, "max_tokens": 4000,
                       "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    deadline = time.time() + 30
    while server.metrics()["running"] == 0:
        assert time.time() < deadline
        time.sleep(0.01)
    time.sleep(0.2)
    s.close()
    while server.metrics().get("aborted", 0) == before.get("aborted", 0):
        assert time.time() < deadline, "the server never saw the disconnect"
        time.sleep(0.02)
    m1 = server.metrics()
    time.sleep(0.3)
    m2 = server.metrics()
    assert m2["running"] == 0
    assert m2["tokens_generated"] == m1["tokens_generated"], "generation went on after the abort"
    assert m1["tokens_generated"] - before["tokens_generated"] < 4000


def test_weight_update_changes_version_and_answers(weights, tmp_path):
    srv = ServerProc(weights[0], tmp_path)
    try:
        body = {"messages": messages(3), "temperature": 0, "max_tokens": 24, "return_token_ids": True}
        st, a = srv.chat(body)
        assert a["system_fingerprint"] == "selroll-neural-v0"
        st, r = srv.request("POST", "/update_weights_from_disk", {"model_path": weights[1], "version": 5})
        assert st == 200 and r["success"] is True and r["version"] == 5
        st, models = srv.request("GET", "/v1/models")
        assert [m["id"] for m in models["data"]] == ["selroll-neural", "selroll-neural-v5"]
        st, b = srv.chat(dict(body, model="selroll-neural-v5"))
        assert st == 200 and b["model"] == "selroll-neural-v5" and b["system_fingerprint"] == "selroll-neural-v5"
        assert b["choices"][0]["token_ids"] != a["choices"][0]["token_ids"]
        assert srv.chat(dict(body, model="selroll-neural-v0"))[0] == 404
        st, r = srv.request("POST", "/update_weights_from_disk", {"model_path": str(tmp_path / "missing.pt")})
        assert st == 400 and r["success"] is False
        assert srv.request("GET", "/v1/models")[1]["data"][1]["id"] == "selroll-neural-v5"
    finally:
        srv.close()


def test_batched_prefill_and_decode_equal_one_sequence_alone(weights):
    """The KV cache's batched prefill (padded) and decode (slots moved on removal) give the logits
    of a full forward pass of each sequence alone."""
    from selroll.neural.model import SlotCache
    model, tok, _ = checkpoint.load(weights[0])

    class Seq:
        slot = -1

    seqs = [tok.encode(prompt.chat_text(messages(i)))[: 20 + 7 * i] for i in range(5)]
    owners = [Seq() for _ in seqs]
    cache = SlotCache(model, 8)
    with torch.no_grad():
        first = cache.add_many(owners, seqs)
        for i, s in enumerate(seqs):
            assert torch.allclose(first[i], model(torch.tensor([s]))[0, -1], atol=1e-4)
        cache.remove(owners[1])  # the last sequence moves into slot 1
        alive = [o for o in cache.owner[:cache.n]]
        nxt = [5 + owners.index(o) for o in alive]
        logits = cache.decode(nxt)
        for j, o in enumerate(alive):
            s = seqs[owners.index(o)] + [nxt[j]]
            assert torch.allclose(logits[j], model(torch.tensor([s]))[0, -1], atol=1e-4)
