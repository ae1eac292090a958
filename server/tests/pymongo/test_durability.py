"""Crash durability: a SIGKILLed server keeps every insert it acknowledged."""

import os
import sys
import threading
import time
import unittest
from datetime import datetime, timedelta

from harness import ServerTestCase


class CrashDurabilityTest(ServerTestCase):
    def test_acknowledged_inserts_survive_sigkill(self):
        self.client.test.create_collection("m", timeseries={"timeField": "t", "metaField": "s"})
        writer = self.server.client(retryWrites=False, serverSelectionTimeoutMS=2000)
        coll = writer.test.m
        acked = []
        failures = []
        t0 = datetime(2024, 1, 1)

        def insert_stream():
            n = 0
            # Until the kill cuts it off: the next insert fails (connection reset, or no
            # server within serverSelectionTimeoutMS).
            while True:
                docs = [{"_id": n + i, "t": t0 + timedelta(seconds=n + i), "s": (n + i) % 5, "v": n + i} for i in range(50)]
                try:
                    coll.insert_many(docs)
                except Exception as e:  # noqa: BLE001 - the kill
                    failures.append(e)
                    return
                acked.extend(d["_id"] for d in docs)
                n += 50

        thread = threading.Thread(target=insert_stream)
        thread.start()
        time.sleep(1.0)
        self.kill_server()
        thread.join(60)
        self.assertFalse(thread.is_alive())
        self.assertGreater(len(acked), 0, "no batch was acknowledged within a second")
        self.assertEqual(len(failures), 1, "the writer should have been cut off by the kill")
        if os.environ.get("TSBUCKET_TEST_VERBOSE"):
            print(f"\n{len(acked)} documents acknowledged before the kill", file=sys.stderr)

        client = self.restart_server()
        coll = client.test.m
        count = coll.count_documents({})
        self.assertGreaterEqual(count, len(acked))
        present = {d["_id"] for d in coll.find({}, {"_id": 1}).batch_size(1000)}
        missing = sorted(set(acked) - present)
        self.assertEqual(missing[:20], [], f"{len(missing)} acknowledged documents lost of {len(acked)}")
        # Whatever came back is whole: each document as inserted.
        for d in coll.find({"_id": {"$in": acked[-50:]}}):
            self.assertEqual(d["t"], t0 + timedelta(seconds=d["_id"]))
            self.assertEqual(d["s"], d["_id"] % 5)
            self.assertEqual(d["v"], d["_id"])
        # And the collection takes more writes.
        coll.insert_one({"_id": -1, "t": t0, "s": 0, "v": -1})
        self.assertEqual(coll.count_documents({}), count + 1)


if __name__ == "__main__":
    unittest.main()
