"""SCRAM-SHA-256 with users from a file, and the refusal of an open non-loopback bind."""

import os
import shutil
import subprocess
import tempfile
import unittest

from pymongo import MongoClient, monitoring
from pymongo.errors import OperationFailure

from harness import BIN, Server


def add_user(path, user, password):
    r = subprocess.run([BIN, "serve", "--dir", os.path.dirname(path), "--auth-file", path, "--add-user", user],
                       input=password + "\n", capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"--add-user failed: {r.stderr}")


class AuthTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tsbucket-auth-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.users = os.path.join(self.tmp, "users")
        add_user(self.users, "alice", "correct horse")
        add_user(self.users, "bob,=x", "pässwörd")
        self.server = Server(directory=os.path.join(self.tmp, "data"), extra_args=["--auth-file", self.users]).start()
        self.addCleanup(self.server.cleanup)
        self.clients = []

    def tearDown(self):
        # Clients first: a client closed after the server waits for it to end its sessions.
        for c in self.clients:
            c.close()
        self.assertEqual(self.server.stop(), 0)

    def login(self, user, password, **kw):
        c = MongoClient(f"mongodb://127.0.0.1:{self.server.port}", username=user, password=password,
                        authSource="admin", serverSelectionTimeoutMS=5000, **kw)
        self.clients.append(c)
        return c

    def test_the_file_holds_no_password(self):
        with open(self.users, encoding="utf-8") as f:
            text = f.read()
        self.assertNotIn("correct horse", text)
        self.assertEqual(len([l for l in text.splitlines() if l.strip()]), 2)
        self.assertIn("alice:SCRAM-SHA-256:15000:", text)

    def test_users_log_in_and_work(self):
        c = self.login("alice", "correct horse")
        c.test.create_collection("m", timeseries={"timeField": "t"})
        c.test.m.insert_one({"t": __import__("datetime").datetime(2024, 1, 1), "v": 1})
        self.assertEqual(c.test.m.count_documents({}), 1)
        status = c.admin.command("connectionStatus")
        self.assertEqual(status["authInfo"]["authenticatedUsers"][0]["user"], "alice")
        # Names with SCRAM's escaped characters and passwords SASLprep keeps as they are.
        c2 = self.login("bob,=x", "pässwörd", authMechanism="SCRAM-SHA-256")
        self.assertEqual(c2.test.m.count_documents({}), 1)

    def test_the_handshake_carries_the_first_step(self):
        # pymongo puts its saslStart in the handshake (speculative authentication); when the
        # server answers it there, the login takes one saslContinue and no saslStart.
        sent = []

        class Listener(monitoring.CommandListener):
            def started(self, event):
                sent.append(event.command_name)

            def succeeded(self, event):
                pass

            def failed(self, event):
                pass

        c = self.login("alice", "correct horse", event_listeners=[Listener()])
        self.assertEqual(c.admin.command("ping")["ok"], 1.0)
        self.assertNotIn("saslStart", sent)
        self.assertEqual(sent.count("saslContinue"), 1)

    def test_wrong_password_and_unknown_user_fail_alike(self):
        for user, pw in [("alice", "wrong"), ("nobody", "correct horse")]:
            with self.assertRaises(OperationFailure) as e:
                self.login(user, pw).admin.command("ping")
            self.assertEqual(e.exception.code, 18)
            self.assertEqual(e.exception.details.get("errmsg"), "Authentication failed.")

    def test_commands_need_a_login(self):
        anon = MongoClient(self.server.uri, serverSelectionTimeoutMS=5000)
        self.clients.append(anon)
        self.assertEqual(anon.admin.command("ping")["ok"], 1.0)  # allowed before a login, as in mongod
        with self.assertRaises(OperationFailure) as e:
            anon.list_database_names()
        self.assertEqual(e.exception.code, 13)
        with self.assertRaises(OperationFailure) as e:
            anon.test.m.insert_one({"t": 1})
        self.assertEqual(e.exception.code, 13)


class BindTest(unittest.TestCase):
    def test_a_non_loopback_bind_without_users_is_refused(self):
        tmp = tempfile.mkdtemp(prefix="tsbucket-bind-")
        self.addCleanup(shutil.rmtree, tmp, True)
        r = subprocess.run([BIN, "serve", "--dir", tmp, "--bind", "0.0.0.0", "--port", "0"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("without authentication", r.stderr)

    def test_a_non_loopback_bind_with_users_serves(self):
        tmp = tempfile.mkdtemp(prefix="tsbucket-bind-")
        self.addCleanup(shutil.rmtree, tmp, True)
        users = os.path.join(tmp, "users")
        add_user(users, "alice", "pw")
        s = Server(directory=os.path.join(tmp, "data"), extra_args=["--bind", "0.0.0.0", "--auth-file", users]).start()
        self.addCleanup(s.cleanup)
        c = MongoClient(f"mongodb://alice:pw@127.0.0.1:{s.port}/?authSource=admin", serverSelectionTimeoutMS=5000)
        self.assertEqual(c.admin.command("ping")["ok"], 1.0)
        c.close()
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    unittest.main()
