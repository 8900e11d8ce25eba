#!/usr/bin/python3
"""openai_400.py — an OpenAI-compatible server that refuses every chat completion.

    openai_400.py --port N [--model NAME]

GET /v1/models (and /models) answers 200 with the OpenAI list shape, {"object": "list", "data":
[{"id": NAME, "object": "model", "created": 0, "owned_by": "stub"}]}: give the actors the same
--model, and their model check at start passes. POST
/v1/chat/completions (and /chat/completions) answers 400 with the error body vLLM and the OpenAI
API use: {"object": "error", "message": ..., "type": "BadRequestError", "param": null, "code":
400}. Counts the chat requests and prints the count on SIGTERM. Standard library only.
"""
import argparse
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

CHAT = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="stub-model")
    a = ap.parse_args()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            u = urlparse(self.path)
            if u.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": a.model, "object": "model", "created": 0, "owned_by": "stub"}]})
            else:
                self._send(404, {"object": "error", "message": "no route %s" % u.path,
                                 "type": "NotFoundError", "param": None, "code": 404})

        def do_POST(self):
            global CHAT
            n = int(self.headers.get("Content-Length") or 0)
            req = self.rfile.read(n) if n else b""
            u = urlparse(self.path)
            if u.path.rstrip("/") in ("/v1/chat/completions", "/chat/completions"):
                CHAT += 1
                try:
                    model = json.loads(req).get("model", "?")
                except ValueError:
                    model = "?"
                self._send(400, {"object": "error", "type": "BadRequestError", "param": None,
                                 "code": 400,
                                 "message": "stub refuses every request (model %s)" % model})
            else:
                self._send(404, {"object": "error", "message": "no route %s" % u.path,
                                 "type": "NotFoundError", "param": None, "code": 404})

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    srv.daemon_threads = True

    def stop(*_):
        print("openai_400.py: %d chat requests refused" % CHAT, flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("openai_400.py: listening on 127.0.0.1:%d" % a.port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
