"""CURVE for selroll's sockets (docs/security.md): key files and a ZAP handler of our own.

Key files are `selroll keygen`'s Z85 text: a ``#`` comment line, then the 40-character key
(``server.pub`` / ``server.key`` for every binding socket, ``<role>.key`` / ``<role>.pub`` per
connecting role, ``authorized/*.pub`` the client keys the servers accept).

A binding socket made a CURVE server admits any client with a valid key unless a ZAP handler
says otherwise. `Authenticator` is that handler (ZeroMQ RFC 27): a thread with a REP socket on
``inproc://zeromq.zap.01`` of the context, answering 200 to a CURVE client whose key is one of the
authorised ``*.pub`` files and 400 to anyone else. It counts and logs (at most 5 lines a second)
the refused ones.
"""
import logging
import os
import threading
import time

import zmq
import zmq.utils.z85

log = logging.getLogger("selroll.curve")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class KeyFileError(ValueError):
    """A key file that is missing or not a key."""


def read_key(path):
    """The 40-character Z85 key in a keygen file (comment lines skipped), as bytes."""
    try:
        with open(path, "rb") as f:
            lines = [ln.strip() for ln in f.read().splitlines()]
    except OSError as e:
        raise KeyFileError("%s: %s" % (path, e.strerror or e)) from None
    keys = [ln for ln in lines if ln and not ln.startswith(b"#")]
    if len(keys) != 1 or len(keys[0]) != 40:
        raise KeyFileError("%s: not a key file (a # comment line, then a 40-character Z85 key)" % path)
    try:
        zmq.utils.z85.decode(keys[0])
    except Exception:
        raise KeyFileError("%s: the key is not Z85 text" % path) from None
    return keys[0]


def authorized_keys(folder):
    """The set of client public keys (Z85 bytes) of the *.pub files in folder."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pub"))
    except OSError as e:
        raise KeyFileError("%s: %s" % (folder, e.strerror or e)) from None
    return {read_key(os.path.join(folder, n)) for n in names}


class Keys:
    """The keys of one process: `Keys(dir)` reads server.pub and, as needed, server.key (to
    bind), the role's pair (to connect: ``<role>.key``, else ``client.key``) and the authorised
    folder (``dir/authorized`` unless given)."""

    def __init__(self, folder, role=None, authorized=None, bind=True):
        self.folder = folder
        self.server_public = read_key(os.path.join(folder, "server.pub"))
        self.server_secret = read_key(os.path.join(folder, "server.key")) if bind else None
        self.authorized_dir = authorized or os.path.join(folder, "authorized")
        self.authorized = authorized_keys(self.authorized_dir) if bind else set()
        self.client_secret = self.client_public = None
        if role:
            for name in (role, "client"):
                p = os.path.join(folder, name + ".key")
                if os.path.exists(p):
                    self.client_secret = read_key(p)
                    self.client_public = zmq.curve_public(self.client_secret)
                    break
            else:
                raise KeyFileError("no %s.key or client.key in %s (selroll keygen writes them)"
                                % (role, folder))

    def server(self, sock, domain="selroll"):
        """Makes sock (before bind) a CURVE server that asks the ZAP handler."""
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.zap_domain = domain.encode()
        sock.curve_server = True

    def client(self, sock):
        """Makes sock (before connect) a CURVE client with the role's pair."""
        if self.client_secret is None:
            raise KeyFileError("no client key pair was loaded")
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public


class Authenticator:
    """The ZAP handler of a context: admits the CURVE clients whose key is in `keys` (a set of
    Z85 bytes, or a callable key -> bool). `refused` counts the others. Start it before binding."""

    def __init__(self, ctx, keys):
        self.ctx = ctx
        self.keys = keys
        self.refused = 0
        self.allowed = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._err = None
        self._log_window = (0.0, 0)
        self._thread = threading.Thread(target=self._run, name="selroll-zap", daemon=True)

    def start(self):
        self._thread.start()
        self._ready.wait(5)
        if self._err:
            raise self._err
        return self

    def _admit(self, key_z85):
        if callable(self.keys):
            return bool(self.keys(key_z85))
        return key_z85 in self.keys

    def _log_refusal(self, address):
        now = time.monotonic()
        start, n = self._log_window
        if now - start >= 1.0:
            start, n = now, 0
        if n < 5:
            log.warning("curve: refused a peer from %s: client key not authorised",
                        address or "an unknown address")
        self._log_window = (start, n + 1)

    def _run(self):
        rep = None
        try:
            rep = self.ctx.socket(zmq.REP)
            rep.linger = 0
            rep.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as e:
            if rep is not None:
                rep.close(0)
            if e.errno == zmq.EADDRINUSE:
                e = zmq.ZMQError(e.errno, "a ZAP handler runs in this ZeroMQ context already: give "
                                 "each CURVE server of its own keys a context of its own")
            self._err = e
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not rep.poll(100):
                    continue
                frames = rep.recv_multipart()
                # version, request id, domain, address, identity, mechanism, credentials...
                if len(frames) < 6:
                    rep.send_multipart([b"1.0", b"", b"500", b"bad ZAP request", b"", b""])
                    continue
                version, rid, _domain, address, _identity, mechanism = frames[:6]
                creds = frames[6:]
                ok = False
                user = b""
                if mechanism == b"CURVE" and len(creds) == 1 and len(creds[0]) == 32:
                    key = zmq.utils.z85.encode(creds[0])
                    ok = self._admit(key)
                    user = key
                if ok:
                    self.allowed += 1
                    rep.send_multipart([version, rid, b"200", b"OK", user, b""])
                else:
                    self.refused += 1
                    self._log_refusal(address.decode(errors="replace"))
                    rep.send_multipart([version, rid, b"400", b"client key not authorised",
                                        b"", b""])
        finally:
            rep.close(0)

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
