"""The model served in vLLM's shapes (python3 -m selroll.neural serve --listen HOST:PORT --weights PATH).

Routes:
  POST /v1/chat/completions   model, messages, temperature, top_p, max_tokens, stop, seed,
                              logprobs, return_token_ids (+ return_prompt_token_ids), ignore_eos,
                              n = 1, stream = false; the answer as vLLM writes it
  GET  /v1/models             the served names: NAME and NAME-v<version>
  GET  /health                200 while serving
  POST /update_weights_from_disk  {"model_path": PATH[, "version": N]}: SGLang's route, which
                              selroll's coordinator speaks with --weights-sync sglang-disk
  GET  /metrics               the engine's counters as JSON (forward passes, tokens, aborts)

Continuous batching: one engine thread owns the model. Each turn it admits the requests that
arrived since the last one (a prefill pass each, up to --max-batch running), then runs one decode
pass for every running sequence at once, each sequence's keys and values kept in its slot of a KV
cache. A request whose client has gone (its handler sees the socket closed) is dropped at the next
token. Only the standard library's http.server and threading, and torch.
"""
import argparse
import collections
import json
import os
import re
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from . import checkpoint, prompt
from .generate import pick
from .model import SlotCache
from .tokenizer import EOS


class BadRequest(Exception):
    def __init__(self, message, status=400, typ="BadRequestError"):
        super().__init__(message)
        self.status = status
        self.typ = typ


class Req:
    def __init__(self, ids, max_tokens, temperature, top_p, stop, seed, ignore_eos=False):
        self.ids = ids
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stop = stop
        self.gen = torch.Generator()
        self.gen.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        self.out = []
        self.lps = []
        self.finish = None
        self.text = None
        self.cancelled = False
        self.done = threading.Event()
        self.slot = -1
        self.version = None
        self.error = None


class Engine:
    def __init__(self, model, tok, version=0, max_batch=64, name="selroll-neural"):
        self.model = model
        self.tok = tok
        self.version = version
        self.name = name
        self.max_batch = max_batch
        self.cache = SlotCache(model, max_batch)
        self.queue = collections.deque()
        self.active = []
        self.cond = threading.Condition()
        self.pending = None  # (model, tok, version, event)
        self.stats = collections.Counter()
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.stop_flag = False
        self.prefill_tokens = 4096
        self._admitting = []

    def start(self):
        self.thread.start()

    def shutdown(self):
        with self.cond:
            self.stop_flag = True
            self.cond.notify_all()
        self.thread.join(5)

    def submit(self, req):
        with self.cond:
            self.queue.append(req)
            self.stats["requests"] += 1
            self.cond.notify_all()

    def swap(self, model, tok, version):
        """Replaces the weights once the running sequences are done (new ones wait meanwhile)."""
        ev = threading.Event()
        with self.cond:
            self.pending = (model, tok, version, ev)
            self.cond.notify_all()
        ev.wait()

    def _finish(self, r, reason):
        r.finish = reason
        if r.slot >= 0:
            self.cache.remove(r)
        if reason == "abort":
            self.stats["aborted"] += 1
        r.done.set()

    def _take(self, r, t, lp):
        """Appends token t to r; returns False when r is finished."""
        r.out.append(t)
        r.lps.append(lp)
        self.stats["tokens_generated"] += 1
        if t == EOS and not r.ignore_eos:
            self._finish(r, "stop")
            return False
        if r.stop:
            text = self.tok.decode(r.out)
            tail = self.tok.decode(r.out[-1:])
            for s in r.stop:
                k = text.find(s, max(0, len(text) - len(tail) - len(s)))
                if k >= 0:
                    r.text = text[:k]
                    self._finish(r, "stop")
                    return False
        if len(r.out) >= r.max_tokens:
            self._finish(r, "length")
            return False
        return True

    def _run(self):
        torch.set_grad_enabled(False)
        while not self.stop_flag:
            try:
                self._loop()
            except Exception as e:  # noqa: BLE001 - fail the requests in flight, keep serving
                sys.stderr.write("selroll.neural serve: engine error: %r\n" % (e,))
                self.stats["engine_errors"] += 1
                with self.cond:
                    victims = list(self.cache.owner[:self.cache.n]) + list(self._admitting)
                    self.cache = SlotCache(self.model, self.max_batch)
                for r in victims:
                    if not r.done.is_set():
                        r.slot = -1
                        r.error = "engine error: %s" % e
                        r.finish = "error"
                        r.done.set()

    def _loop(self):
        while True:
            with self.cond:
                while not self.stop_flag and not self.cache.n and not (self.queue and self.pending is None) \
                        and self.pending is None:
                    self.cond.wait()
                if self.stop_flag:
                    return
                if self.pending is not None and not self.cache.n:
                    model, tok, version, ev = self.pending
                    self.pending = None
                    self.model, self.tok, self.version = model, tok, version
                    self.cache = SlotCache(model, self.max_batch)
                    self.stats["weight_updates"] += 1
                    ev.set()
                    continue
                new = []
                if self.pending is None:
                    while self.queue and self.cache.n + len(new) < self.max_batch:
                        new.append(self.queue.popleft())
                self._admitting = new
            cache = self.cache
            for r in list(cache.owner[:cache.n]):
                if r.cancelled:
                    self._finish(r, "abort")
            for r in new:
                if r.cancelled:
                    self._finish(r, "abort")
            new = sorted((r for r in new if not r.cancelled), key=lambda r: len(r.ids))
            i = 0
            while i < len(new):
                # prompts of similar lengths together, at most prefill_tokens padded tokens a pass
                j = i + 1
                while j < len(new) and len(new[j].ids) * (j + 1 - i) <= self.prefill_tokens:
                    j += 1
                group = new[i:j]
                i = j
                t0 = time.perf_counter()
                logits = cache.add_many(group, [r.ids for r in group])
                self.stats["prefill_ms"] += (time.perf_counter() - t0) * 1000
                self.stats["forward_passes"] += 1
                self.stats["prefill_passes"] += 1
                for j2, r in enumerate(group):
                    r.version = self.version
                    self.stats["prompt_tokens"] += len(r.ids)
                    t, lp = pick(logits[j2], r.temperature, r.top_p, r.gen)
                    self._take(r, t, lp)
            running = list(cache.owner[:cache.n])
            self.active = running
            if not running:
                continue
            t0 = time.perf_counter()
            logits = cache.decode([r.out[-1] for r in running])
            self.stats["decode_ms"] += (time.perf_counter() - t0) * 1000
            self.stats["forward_passes"] += 1
            self.stats["decode_passes"] += 1
            self.stats["decode_rows"] += len(running)
            t0 = time.perf_counter()
            picks = [pick(logits[j], r.temperature, r.top_p, r.gen) for j, r in enumerate(running)]
            self.stats["sample_ms"] += (time.perf_counter() - t0) * 1000
            for r, (t, lp) in zip(running, picks):
                if r.cancelled:
                    self._finish(r, "abort")
                else:
                    self._take(r, t, lp)
            self.active = list(cache.owner[:cache.n])


def _num(body, key, lo, hi, default, integer=False):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise BadRequest("%s must be %s" % (key, "an integer" if integer else "a number"))
    if not lo <= v <= hi:
        raise BadRequest("%s must be in [%s, %s], got %s." % (key, lo, hi, v))
    return v


class Server:
    def __init__(self, engine, served_name, default_max_tokens=64):
        self.engine = engine
        self.default_max_tokens = default_max_tokens
        self.name = served_name
        self.created = int(time.time())

    def versioned(self):
        return "%s-v%d" % (self.name, self.engine.version)

    def parse(self, body):
        e = self.engine
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model not in (self.name, self.versioned()):
            raise BadRequest("The model `%s` does not exist." % model, 404, "NotFoundError")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("messages must be a non-empty list")
        norm = []
        for m in msgs:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # OpenAI's content parts: the text ones, joined
                if not all(isinstance(x, dict) and x.get("type") == "text" and isinstance(x.get("text"), str)
                           for x in content):
                    raise BadRequest("only text content parts are supported")
                content = "".join(x["text"] for x in content)
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(content, str):
                raise BadRequest("each message needs a string role and a string content")
            norm.append({"role": m["role"], "content": content})
        msgs = norm
        if body.get("n", 1) != 1:
            raise BadRequest("n must be 1")
        if body.get("stream", False):
            raise BadRequest("stream is not supported by this server")
        temperature = _num(body, "temperature", 0.0, 100.0, 1.0)
        top_p = _num(body, "top_p", 1e-9, 1.0, 1.0)
        seed = _num(body, "seed", -(2 ** 63), 2 ** 64 - 1, None, integer=True)
        if seed is not None:
            seed &= (2 ** 63) - 1
        stop = body.get("stop")
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise BadRequest("stop must be a string or a list of non-empty strings")
        ids = e.tok.encode(prompt.chat_text(msgs))
        n_ctx = e.model.config.n_ctx
        max_tokens = _num(body, "max_tokens", 1, 10 ** 9, None, integer=True)
        if len(ids) >= n_ctx or (max_tokens is not None and len(ids) + max_tokens > n_ctx):
            raise BadRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "
                             "(%d in the messages, %d in the completion). Please reduce the length of the "
                             "messages or completion." % (n_ctx, len(ids) + (max_tokens or 0), len(ids),
                                                          max_tokens or 0))
        if max_tokens is None:
            max_tokens = min(self.default_max_tokens, n_ctx - len(ids))
        for k in ("logprobs", "return_token_ids", "return_prompt_token_ids", "ignore_eos"):
            if k in body and body[k] is not None and not isinstance(body[k], bool):
                raise BadRequest("%s must be a boolean" % k)
        return Req(ids, max_tokens, temperature, top_p, stop, seed, bool(body.get("ignore_eos"))), model

    def answer(self, req, body, model):
        tok = self.engine.tok
        text = req.text if req.text is not None else tok.decode(req.out)
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                          "tool_calls": []},
                  "logprobs": None, "finish_reason": req.finish, "stop_reason": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"token": tok.token_text(t), "logprob": lp, "bytes": list(tok.piece_bytes[t]), "top_logprobs": []}
                for t, lp in zip(req.out, req.lps)]}
        out = {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
               "model": model or self.name, "choices": [choice],
               "usage": {"prompt_tokens": len(req.ids), "completion_tokens": len(req.out),
                         "total_tokens": len(req.ids) + len(req.out)},
               "system_fingerprint": "%s-v%d" % (self.name, req.version)}
        if body.get("return_token_ids"):
            choice["token_ids"] = list(req.out)
            out["prompt_token_ids"] = None if body.get("return_prompt_token_ids") is False else list(req.ids)
        return out


def error_body(status, message, typ="BadRequestError"):
    return {"object": "error", "message": message, "type": typ, "param": None, "code": status}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_obj = None  # Server
    quiet = True

    def log_message(self, fmt, *a):
        if not self.quiet:
            sys.stderr.write("%s - %s\n" % (self.address_string(), fmt % a))

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        s = self.server_obj
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": n, "object": "model", "created": s.created, "owned_by": "selroll", "root": n,
                 "parent": None, "max_model_len": s.engine.model.config.n_ctx}
                for n in (s.name, s.versioned())]})
        elif path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/metrics":
            st = dict(s.engine.stats)
            st.update({"version": s.engine.version, "running": len(s.engine.active), "waiting": len(s.engine.queue)})
            self.send_json(200, st)
        else:
            self.send_json(404, error_body(404, "Not Found: %s" % self.path, "NotFoundError"))

    def _read_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        try:
            return json.loads(raw)
        except ValueError as e:
            raise BadRequest("invalid JSON body: %s" % e)

    def _client_gone(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_POST(self):
        s = self.server_obj
        path = self.path.split("?")[0].rstrip("/")
        try:
            if path in ("/v1/chat/completions", "/chat/completions"):
                body = self._read_json()
                req, model = s.parse(body)
                s.engine.submit(req)
                while not req.done.wait(0.02):
                    if self._client_gone():
                        req.cancelled = True
                        with s.engine.cond:
                            s.engine.cond.notify_all()
                        req.done.wait()
                        self.close_connection = True
                        return
                if req.finish == "abort":
                    self.close_connection = True
                    return
                if req.error:
                    self.send_json(500, error_body(500, req.error, "InternalServerError"))
                    return
                self.send_json(200, s.answer(req, body, model))
            elif path == "/update_weights_from_disk":
                body = self._read_json()
                mp = body.get("model_path") if isinstance(body, dict) else None
                if not isinstance(mp, str) or not mp:
                    raise BadRequest("model_path must be a non-empty string")
                try:
                    model, tok, info = checkpoint.load(mp)
                except Exception as e:  # noqa: BLE001 - any load failure is the client's answer
                    self.send_json(400, {"success": False, "message": "Failed to load %s: %s" % (mp, e)})
                    return
                v = body.get("version")
                if not isinstance(v, int) or isinstance(v, bool):
                    v = info.get("version")
                if not isinstance(v, int):
                    m = re.search(r"(?:^|[^0-9])v(?:ersion)?[-_]?(\d+)(?:[^0-9/]*)$", os.path.basename(mp.rstrip("/")))
                    v = int(m.group(1)) if m else s.engine.version + 1
                s.engine.swap(model, tok, v)
                self.send_json(200, {"success": True, "message": "Succeeded to update model weights.",
                                     "version": v})
            else:
                self.send_json(404, error_body(404, "Not Found: %s" % self.path, "NotFoundError"))
        except BadRequest as e:
            self.send_json(e.status, error_body(e.status, str(e), e.typ))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - a bug is a 500 in vLLM's shape, not a dropped connection
            sys.stderr.write("selroll.neural serve: %s %s: %r\n" % (self.command, self.path, e))
            self.send_json(500, error_body(500, "internal error: %s" % e, "InternalServerError"))


def make_server(listen, model, tok, version=0, name="selroll-neural", max_batch=64, default_max_tokens=64):
    host, _, port = listen.rpartition(":")
    engine = Engine(model, tok, version=version, max_batch=max_batch, name=name)
    engine.start()
    handler = type("H", (Handler,), {"server_obj": Server(engine, name, default_max_tokens)})
    ThreadingHTTPServer.request_queue_size = 256  # the listen backlog (5 by default)
    httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port)), handler)
    httpd.daemon_threads = True
    return httpd, engine


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m selroll.neural serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any free one)")
    ap.add_argument("--weights", required=True, help="checkpoint (python3 -m selroll.neural pretrain)")
    ap.add_argument("--name", default="selroll-neural", help="served model name (also NAME-v<version>)")
    ap.add_argument("--version", type=int, default=None, help="served version (default: the checkpoint's, else 0)")
    ap.add_argument("--max-batch", type=int, default=64, help="sequences decoded at once")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--default-max-tokens", type=int, default=64,
                    help="completion cap of a request without max_tokens (an answer is ~12 tokens)")
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--log-requests", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model, tok, info = checkpoint.load(args.weights)
    except Exception as e:  # noqa: BLE001
        sys.stderr.write("selroll.neural serve: cannot load %s: %s\n" % (args.weights, e))
        return 2
    version = args.version if args.version is not None else int(info.get("version", 0))
    Handler.quiet = not args.log_requests
    httpd, engine = make_server(args.listen, model, tok, version, args.name, args.max_batch,
                                args.default_max_tokens)
    port = httpd.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(args.port_file + ".tmp", args.port_file)
    sys.stderr.write("selroll.neural serve: %s (%d parameters, version %d) on %s:%d\n" % (
        args.weights, model.n_params(), version, httpd.server_address[0], port))
    sys.stderr.flush()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    engine.shutdown()
    return 0
