"""The selroll registry in Redis (docs/redis.md): a worker's hash with a TTL it renews.

An env worker registers as ``selroll:<run>:envw:<id>`` with at least ``endpoint`` and ``kind``
(the C worker also writes ``capacity``, ``load``, ``pid``, ``host``, ``version``), sets a TTL of
3 heartbeats and rewrites both every heartbeat (2 s by default); it deletes the hash on a clean
exit. The coordinator reads these hashes to name env workers and their kinds to the actors.

Redis is reached with the `redis` package (Debian's python3-redis) when it is installed, else
with `Resp`, a few lines of RESP over a plain socket: the package needs neither.
"""
import logging
import socket
import threading
import urllib.parse

log = logging.getLogger("selroll.registry")


class RedisError(Exception):
    pass


class RedisAuthError(RedisError):
    """Redis refused the credentials: trying again cannot help."""


# The starts of the error replies by which Redis refuses credentials (AUTH, or a command sent
# without them).
_REFUSALS = ("NOAUTH", "WRONGPASS", "NOPERM", "ERR invalid password", "ERR AUTH",
             "ERR Client sent AUTH")


def _error(msg):
    return RedisAuthError(msg) if msg.startswith(_REFUSALS) else RedisError(msg)


def parse_url(url):
    """redis://[[user]:password@]host[:port][/db] -> (host, port, user, password, db)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "redis" or not u.hostname:
        raise ValueError("not a redis://[user:password@]HOST[:PORT][/DB] URL: %r" % url)
    db = u.path.strip("/")
    if db and not db.isdigit():
        raise ValueError("the database in %r is not a number" % url)
    unq = urllib.parse.unquote
    return (u.hostname, u.port or 6379, unq(u.username) if u.username else None,
            unq(u.password) if u.password else None, int(db) if db else 0)


class Resp:
    """A minimal Redis client: one connection, one command at a time."""

    def __init__(self, url, timeout=2.0):
        self.host, self.port, self.user, self.password, self.db = parse_url(url)
        self.timeout = timeout
        self.sock = None
        self.rfile = None

    def _connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.rfile = self.sock.makefile("rb")
        if self.password:
            args = ("AUTH", self.user, self.password) if self.user else ("AUTH", self.password)
            self._call(*args)
        if self.db:
            self._call("SELECT", self.db)

    def _read(self):
        line = self.rfile.readline()
        if not line.endswith(b"\r\n"):
            raise RedisError("the connection was closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise _error(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rfile.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RedisError("unexpected reply %r" % line[:40])

    def _call(self, *args):
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        self.sock.sendall(b"*%d\r\n" % len(parts) +
                          b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return self._read()

    def call(self, *args):
        """Sends one command, returns the reply (str, int, bytes, list or None); raises
        RedisError for an error reply and OSError when the server cannot be reached."""
        try:
            if self.sock is None:
                self._connect()
            return self._call(*args)
        except (OSError, RedisError):
            self.close()
            raise

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = self.rfile = None


class _RedisPy:
    """The same `call` over redis-py."""

    def __init__(self, url, timeout=2.0):
        import redis  # noqa: F401 - only when installed
        parse_url(url)
        self.r = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._auth = redis.AuthenticationError
        self._errors = (redis.RedisError, OSError)

    def call(self, *args):
        try:
            return self.r.execute_command(*args)
        except self._auth as e:
            raise RedisAuthError("WRONGPASS %s" % e) from None
        except self._errors as e:
            raise _error(str(e)) from None

    def close(self):
        self.r.close()


def connect(url, timeout=2.0, client="auto"):
    """A client for url: client "auto" (redis-py when importable, else Resp), "redis-py" or
    "resp"."""
    if client not in ("auto", "redis-py", "resp"):
        raise ValueError("client must be auto, redis-py or resp")
    if client != "resp":
        try:
            return _RedisPy(url, timeout)
        except ImportError:
            if client == "redis-py":
                raise
    return Resp(url, timeout)


class Registration:
    """Keeps ``selroll:<run>:<kind_of_role>:<id>`` alive: `start()` writes it and renews it every
    `heartbeat` seconds from a thread (fields from `fields()`, a callable returning a dict), with a
    TTL of 3 heartbeats; `stop()` ends the thread and deletes the entry.

    A Redis that does not answer yet stops nothing: `first()` says so once, and the heartbeats
    register the entry when Redis answers. Credentials Redis refuses can never work: `first()`
    raises RedisAuthError, and a refusal met later by the heartbeats ends them and calls
    `on_refused(error)`."""

    def __init__(self, url, run, role, ident, fields, heartbeat=2.0, client="auto",
                 on_refused=None):
        self.key = "selroll:%s:%s:%s" % (run, role, ident)
        self.fields = fields
        self.heartbeat = heartbeat
        self.failures = 0
        self.registered = False  # written at least once
        self.waiting = False     # the first write found no Redis; the heartbeats keep trying
        self.refused = None      # the refusal that ended the heartbeats
        self.on_refused = on_refused
        self.redis = connect(url, client=client)
        self._stop = threading.Event()
        self._stopped = False
        self._thread = None

    def write(self):
        f = self.fields()
        args = []
        for k, v in f.items():
            args += [k, v]
        self.redis.call("HSET", self.key, *args)
        self.redis.call("PEXPIRE", self.key, int(3 * self.heartbeat * 1000))
        if self.waiting:
            log.info("Redis answers: registered as %s", self.key)
            self.waiting = False
        self.registered = True

    def first(self):
        """The first write: True once written, False when Redis does not answer (said once; the
        heartbeats of `start()` keep trying). Raises RedisAuthError when Redis refuses the
        credentials."""
        try:
            self.write()
            return True
        except RedisAuthError:
            raise
        except (OSError, RedisError) as e:
            log.warning("Redis does not answer (%s): serving; %s is written once it answers",
                        e, self.key)
            self.waiting = True
            return False

    def start(self):
        if not self.registered and not self.waiting:
            self.first()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="selroll-registry", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.heartbeat):
            try:
                self.write()
            except RedisAuthError as e:
                log.error("Redis refused the credentials of %s: %s", self.key, e)
                self.refused = e
                if self.on_refused:
                    self.on_refused(e)
                return
            except (OSError, RedisError) as e:
                self.failures += 1
                if not self.waiting and (self.failures <= 3 or self.failures % 30 == 0):
                    log.warning("registry refresh of %s failed: %s", self.key, e)

    def stop(self):
        """Stops the heartbeats and deletes the entry (logs when Redis does not answer); once."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            if self.registered:
                self.redis.call("DEL", self.key)
        except (OSError, RedisError) as e:
            log.warning("could not unregister %s from Redis: %s", self.key, e)
        finally:
            self.redis.close()
