#!/usr/bin/python3
"""stub_openai.py — an OpenAI-compatible chat server that answers in one real server's documented
response shape, for tests/it_backends.sh. Python standard library only; one thread per request.

    stub_openai.py --flavor vllm|vllm-new|sglang|llamacpp|ollama [--model NAME] [--log FILE]
                   [--throttle N] [--long] [--no-usage] [--port-file FILE]
                   [--token-id-strings] [--token-mismatch] [--load-delay-ms MS] [--refuse-load]
                   [--uds PATH]

It plays the household environment plausibly: the answer's action is taken from the prompt's
admissible list (docs/prompt.md), chosen with the request's seed, so episodes proceed.

Shapes (non-streaming `POST /v1/chat/completions`, `GET /v1/models`):
  vllm      message.reasoning_content beside content, logprobs.content[], usage; model echoed
  vllm-new  message.reasoning, usage.completion_tokens_details.reasoning_tokens
  sglang    message.reasoning_content, matched_stop; the model field is the served model path
            whatever was requested (SGLang answers 200 for an unknown model name)
  llamacpp  message.reasoning_content, system_fingerprint (build), timings; model echoed
  ollama    message.reasoning, system_fingerprint "fp_ollama", no logprobs; a seed that is not
            an integer gets 400 like Ollama's Go JSON decoder (the field is an int)

--model NAME is what /v1/models lists (default Qwen/Qwen3-8B). --log FILE appends one JSON line
per chat request: {"model", "seed", "seed_type", "step", "status"}. --throttle N answers the
first N chat requests 429 with Retry-After: 1. --long makes every answer about 12000 tokens (60 KB
of content) with logprobs. --no-usage leaves usage out. The chosen port is written to
--port-file once the server listens. --uds PATH serves on that Unix socket instead (clients use
unix:PATH; --port-file then gets 0).

Token ids (vllm, vllm-new, sglang, when the request has "return_token_ids": true): the completion
(reasoning, a space, content) is split on spaces, each piece one token with id crc32(piece) % 150000
and logprob -(id % 97 + 1) / 64; the prompt (every message's content joined with spaces) likewise.
vLLM's shape puts prompt_token_ids on the response and token_ids on the choice, SGLang's both on
the choice. --token-id-strings leaves token_ids out and writes logprobs.content[].token as
"token_id:N" (vLLM's --return-tokens-as-token-ids). --token-mismatch says one completion token more
in usage than it sent. The request log entry then also holds "reasoning", "token_ids",
"token_logprobs" and "prompt_token_ids" as sent.

Weight loading (for --weights-sync): POST /v1/load_lora_adapter and /v1/unload_lora_adapter
(vLLM: 200 with a plain-text "Success: ..." body), /load_lora_adapter, /unload_lora_adapter and
/update_weights_from_disk (SGLang: 200 with {"success": true, "message": ...}) each append
{"admin": ROUTE, "body": {...}, "t0": start, "t1": end} to the log; --load-delay-ms waits that long
before answering a load, --refuse-load answers every load 400 in the flavor's error shape.
"""
import argparse
import ast
import json
import random
import sys
import threading
import time
import zlib
import socketserver
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADMIN = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/load_lora_adapter",
         "/unload_lora_adapter", "/update_weights_from_disk")
ADM = "Your admissible actions of the current situation are: ["


class FloatSeen(float):
    """A JSON number written with a fraction or an exponent (json's parse_float)."""


def admissible(messages):
    user = ""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            user = m["content"]
    i = user.rfind(ADM)
    if i < 0:
        return user, []
    j = user.find("].", i)
    try:
        acts = ast.literal_eval(user[i + len(ADM) - 1:j + 1])
    except (ValueError, SyntaxError):
        acts = []
    return user, [a for a in acts if isinstance(a, str)]


def tokens(text):
    return len(text.split())


def tok_ids(text):
    return [zlib.crc32(p.encode()) % 150000 for p in text.split(" ")]


def tok_lp(i):
    return -((i % 97) + 1) / 64.0


class Stub:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.chats = 0
        self.log = open(args.log, "a") if args.log else None

    def record(self, entry):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(entry) + "\n")
                self.log.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    stub = None

    def log_message(self, fmt, *a):
        pass

    def send_json(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def error_body(self, status, message):
        a = self.stub.args
        if a.flavor in ("vllm", "vllm-new", "sglang"):
            return {"object": "error", "message": message, "type": "BadRequestError",
                    "param": None, "code": status}
        return {"error": {"message": message, "type": "invalid_request_error", "code": status}}

    def admin(self, raw):
        a = self.stub.args
        t0 = time.time()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        load = "unload" not in self.path
        if load and a.load_delay_ms:
            time.sleep(a.load_delay_ms / 1000.0)
        self.stub.record({"admin": self.path, "body": body, "t0": t0, "t1": time.time()})
        if load and a.refuse_load:
            self.send_json(400, self.error_body(400, "Loading lora %s failed: No adapter found for %s" % (
                (body or {}).get("lora_name"), (body or {}).get("lora_path") or (body or {}).get("model_path"))))
        elif self.path.startswith("/v1/"):
            msg = ("Success: LoRA adapter '%s' %s successfully." % (
                (body or {}).get("lora_name"), "added" if load else "removed")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
        else:
            self.send_json(200, {"success": True, "message": "Succeeded to update model weights."})

    def do_GET(self):
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": self.stub.args.model, "object": "model", "created": 1737500000,
                 "owned_by": "stub"}]})
        elif self.path == "/health":
            self.send_json(200, {"status": "ok"})
        else:
            self.send_json(404, self.error_body(404, "no route " + self.path))

    def do_POST(self):
        a = self.stub.args
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        if self.path in ADMIN:
            self.admin(raw)
            return
        if not self.path.endswith("/chat/completions"):
            self.send_json(404, self.error_body(404, "no route " + self.path))
            return
        try:
            req = json.loads(raw, parse_float=FloatSeen)
        except ValueError as e:
            self.send_json(400, self.error_body(400, "invalid JSON: %s" % e))
            return
        seed = req.get("seed")
        seed_type = "float" if isinstance(seed, FloatSeen) else type(seed).__name__
        user, acts = admissible(req.get("messages") or [])
        step = 1
        at = user.find("You are now at step ")
        if at >= 0:
            step = int(user[at + 20:].split(" ", 1)[0])
        entry = {"model": req.get("model"), "seed": seed if seed_type == "int" else str(seed),
                 "seed_type": seed_type, "step": step}
        with self.stub.lock:
            self.stub.chats += 1
            k = self.stub.chats
        if k <= a.throttle:
            entry["status"] = 429
            self.stub.record(entry)
            self.send_json(429, self.error_body(429, "rate limited, try again"),
                           headers=[("Retry-After", "1")])
            return
        if a.flavor == "ollama" and seed is not None and seed_type != "int":
            entry["status"] = 400
            self.stub.record(entry)
            self.send_json(400, {"error": {
                "message": "json: cannot unmarshal number %s into Go struct field "
                           "ChatCompletionRequest.seed of type int" % seed,
                "type": "invalid_request_error", "param": None, "code": None}})
            return
        entry["status"] = 200
        self.stub.record(entry)
        rng = random.Random(seed if seed_type == "int" else 0)
        action = rng.choice(acts) if acts else "look"
        reasoning = "The goal needs me to look around first; %s is admissible." % action
        want_ids = req.get("return_token_ids") is True and a.flavor in ("vllm", "vllm-new", "sglang")
        if want_ids:
            reasoning += " #%d" % k  # one answer told apart from another
        content = ("word " * 12000 if a.long else "") + "<action>%s</action>" % action
        n_reason, n_content = tokens(reasoning), (12000 + 1 if a.long else tokens(content))
        message = {"role": "assistant", "content": content}
        if a.flavor in ("vllm", "sglang", "llamacpp"):
            message["reasoning_content"] = reasoning
        else:
            message["reasoning"] = reasoning
        if a.flavor == "vllm":
            message["tool_calls"] = []
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        if want_ids:
            ids = tok_ids(reasoning + " " + content)
            pids = tok_ids(" ".join(m.get("content") or "" for m in req.get("messages") or []))
            lps = [tok_lp(i) for i in ids]
            if req.get("logprobs"):
                choice["logprobs"] = {"content": [
                    {"token": ("token_id:%d" % i) if a.token_id_strings else "t%d" % i,
                     "logprob": lp, "bytes": None, "top_logprobs": []} for i, lp in zip(ids, lps)]}
            if not a.token_id_strings:
                choice["token_ids"] = ids
            if a.flavor == "sglang":
                choice["prompt_token_ids"] = pids
            entry.update({"reasoning": reasoning, "token_ids": ids, "token_logprobs": lps,
                          "prompt_token_ids": pids})
            self.stub.record(dict(entry, status="ids"))
        elif req.get("logprobs") and a.flavor != "ollama":
            pieces = content.split(" ") if a.long else [content]
            choice["logprobs"] = {"content": [
                {"token": p, "logprob": -0.25, "bytes": list(p.encode()[:8]),
                 "top_logprobs": [{"token": p, "logprob": -0.25, "bytes": list(p.encode()[:8])}]}
                for p in pieces]}
        elif a.flavor != "ollama":
            choice["logprobs"] = None
        if a.flavor == "vllm":
            choice["stop_reason"] = None
        if a.flavor == "sglang":
            choice["matched_stop"] = 151645
        usage = {"prompt_tokens": tokens(user), "completion_tokens": n_reason + n_content,
                 "total_tokens": tokens(user) + n_reason + n_content}
        if want_ids:
            n_out = len(ids) + (1 if a.token_mismatch else 0)
            usage = {"prompt_tokens": len(pids), "completion_tokens": n_out,
                     "total_tokens": len(pids) + n_out}
        if a.flavor == "vllm-new":
            usage["completion_tokens_details"] = {"reasoning_tokens": n_reason}
        model = a.model if a.flavor == "sglang" else req.get("model", a.model)
        body = {"id": "chatcmpl-stub%d" % k, "object": "chat.completion",
                "created": int(time.time()), "model": model, "choices": [choice]}
        if not a.no_usage:
            body["usage"] = usage
        if want_ids and a.flavor != "sglang":
            body["prompt_token_ids"] = pids
        if a.flavor == "llamacpp":
            body["system_fingerprint"] = "b4600-1a2b3c4d"
            body["timings"] = {"prompt_n": usage["prompt_tokens"], "prompt_ms": 3.1,
                               "predicted_n": usage["completion_tokens"], "predicted_ms": 9.2}
        if a.flavor == "ollama":
            body["system_fingerprint"] = "fp_ollama"
        self.send_json(200, body)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flavor", required=True,
                   choices=["vllm", "vllm-new", "sglang", "llamacpp", "ollama"])
    p.add_argument("--model", default="Qwen/Qwen3-8B")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--log")
    p.add_argument("--throttle", type=int, default=0)
    p.add_argument("--long", action="store_true")
    p.add_argument("--no-usage", action="store_true")
    p.add_argument("--token-id-strings", action="store_true")
    p.add_argument("--token-mismatch", action="store_true")
    p.add_argument("--load-delay-ms", type=int, default=0)
    p.add_argument("--refuse-load", action="store_true")
    p.add_argument("--uds")
    args = p.parse_args()
    Handler.stub = Stub(args)
    if args.uds:
        class UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
            def get_request(self):  # a Unix peer has no address: name it for the handler
                sock, _ = self.socket.accept()
                return sock, ("unix", 0)
        srv = UnixHTTPServer(args.uds, Handler)
    else:
        srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write("%d\n" % (0 if args.uds else srv.server_address[1]))
        import os
        os.rename(args.port_file + ".tmp", args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
