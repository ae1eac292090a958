"""Test harness: runs `tsbucket serve` on a temporary directory and hands out pymongo clients.

The binary is `$TSBUCKET_BIN`, or `target/debug/tsbucket` under the repository root (three
directories above this file's folder: pymongo -> tests -> server -> root).

Run the suite from the repository root with

    python -m unittest discover -s server/tests/pymongo -v
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from pymongo import MongoClient

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BIN = os.environ.get("TSBUCKET_BIN") or os.path.join(REPO_ROOT, "target", "debug", "tsbucket")

LISTENING = re.compile(r"listening on (\S+):(\d+)")
STOP_TIMEOUT = 20.0
START_TIMEOUT = 30.0


class Server:
    """One `tsbucket serve` process over `directory` (a fresh temporary one by default)."""

    def __init__(self, directory=None, extra_args=()):
        self._own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="tsbucket-pymongo-")
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None
        self.first_line = None
        self.clients = []
        self._stderr_lines = []
        self._stdout_lines = []

    # -- process control ------------------------------------------------------------------

    def start(self):
        if not os.path.exists(BIN):
            raise RuntimeError(
                f"tsbucket binary not found at {BIN}: build it with `cargo build -p tsbucket-cli` "
                "or set TSBUCKET_BIN"
            )
        args = [BIN, "serve", "--dir", self.dir, "--port", "0", *self.extra_args]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        line_box = []
        got_line = threading.Event()

        def read_first():
            line_box.append(self.proc.stdout.readline())
            got_line.set()

        threading.Thread(target=read_first, daemon=True).start()
        if not got_line.wait(START_TIMEOUT):
            self.proc.kill()
            raise RuntimeError("tsbucket serve printed nothing within %.0f s" % START_TIMEOUT)
        line = line_box[0]
        m = LISTENING.search(line or "")
        if not m:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise RuntimeError(f"unexpected first line from tsbucket serve: {line!r}; stderr: {err}")
        self.first_line = line.rstrip("\n")
        self.port = int(m.group(2))
        # Drain both pipes so that the server never blocks on a full pipe.
        self._drains = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, self._stdout_lines), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self._stderr_lines), daemon=True),
        ]
        for t in self._drains:
            t.start()
        return self

    def _reap(self):
        """After the process exited: finish reading its output and close the pipes."""
        for t in getattr(self, "_drains", []):
            t.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except Exception:
                pass
        self.proc = None

    @staticmethod
    def _drain(stream, sink):
        try:
            for line in stream:
                sink.append(line)
        except (ValueError, OSError):
            pass

    @property
    def uri(self):
        return f"mongodb://127.0.0.1:{self.port}"

    def client(self, **kwargs):
        """A new MongoClient to this server, closed when the server stops."""
        options = {"serverSelectionTimeoutMS": 5000}
        options.update(kwargs)
        c = MongoClient(self.uri, **options)
        self.clients.append(c)
        return c

    def close_clients(self):
        for c in self.clients:
            try:
                c.close()
            except Exception:
                pass
        self.clients = []

    def stop(self):
        """SIGINT, then wait; SIGKILL after 20 s. Returns the exit code."""
        self.close_clients()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self._reap()
        return rc

    def kill(self):
        """SIGKILL: the server stops at once, without closing anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self._reap()
        self.close_clients()

    def restart(self):
        """Stops the server (if running) and starts a new one on the same directory."""
        self.stop()
        return self.start()

    def stderr(self):
        return "".join(self._stderr_lines)

    def cleanup(self):
        if self.proc is not None:
            self.kill()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


# -- the CLI, for differential checks ---------------------------------------------------------


def cli(*args, timeout=120):
    """Runs `tsbucket ARGS...` and returns its stdout; fails on a non-zero exit."""
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"tsbucket {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def cli_json_lines(*args):
    return [json.loads(line) for line in cli(*args).splitlines() if line.strip()]


def relaxed(doc):
    """A document as relaxed Extended JSON, parsed back: the form the CLI prints."""
    from bson import json_util

    return json.loads(json_util.dumps(doc, json_options=json_util.RELAXED_JSON_OPTIONS))


# -- test cases ---------------------------------------------------------------------------------


class ServerTestCase(unittest.TestCase):
    """A fresh server (on a fresh directory) per test; `self.client` talks to it."""

    server_args = ()

    def setUp(self):
        self.server = Server(extra_args=self.server_args).start()
        self.addCleanup(self.server.cleanup)
        self.client = self.server.client()

    def tearDown(self):
        rc = self.server.stop()
        self.assertIn(rc, (0, None), "tsbucket serve did not exit cleanly on SIGINT; stderr:\n" + self.server.stderr())

    def restart_server(self):
        """Restarts the server on the same directory and returns a new client."""
        self.server.restart()
        self.client = self.server.client()
        return self.client

    def kill_server(self):
        self.server.kill()
