"""Several clients at once, each with its own MongoClient and connections."""

import threading
import unittest
from datetime import datetime, timedelta

from harness import ServerTestCase

THREADS = 8
BATCHES = 10
BATCH = 100


class ConcurrentClientsTest(ServerTestCase):
    def test_concurrent_inserts_and_reads(self):
        db = self.client.test
        db.create_collection("m", timeseries={"timeField": "t", "metaField": "worker"})
        errors = []
        start = threading.Barrier(THREADS)
        t0 = datetime(2024, 1, 1)

        def work(w):
            try:
                client = self.server.client()
                coll = client.test.m
                start.wait(30)
                for b in range(BATCHES):
                    docs = [
                        {"_id": f"{w}-{b}-{i}", "t": t0 + timedelta(seconds=b * BATCH + i), "worker": w, "v": i}
                        for i in range(BATCH)
                    ]
                    coll.insert_many(docs)
                    # Each client reads its own writes at once.
                    n = coll.count_documents({"worker": w})
                    if n != (b + 1) * BATCH:
                        errors.append(f"worker {w} after batch {b}: count {n}, expected {(b + 1) * BATCH}")
                    if b % 3 == 0:
                        got = list(coll.find({"worker": w}, {"v": 1}).sort("t", -1).limit(5))
                        if [d["v"] for d in got] != [99, 98, 97, 96, 95]:
                            errors.append(f"worker {w}: latest five {[d['v'] for d in got]}")
                        coll.count_documents({})  # a read of everyone's writes
                client.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"worker {w}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=work, args=(w,)) for w in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "a client thread hung")
        self.assertEqual(errors, [])
        total = THREADS * BATCHES * BATCH
        self.assertEqual(db.m.count_documents({}), total)
        self.assertEqual(db.command("count", "m")["n"], total)
        per_worker = {d["_id"]: d["n"] for d in db.m.aggregate([{"$group": {"_id": "$worker", "n": {"$sum": 1}}}])}
        self.assertEqual(per_worker, {w: BATCHES * BATCH for w in range(THREADS)})
        self.assertEqual(len(db.m.distinct("_id")), total)

    def test_many_connections_one_client(self):
        db = self.client.test
        db.create_collection("m", timeseries={"timeField": "t"})
        db.m.insert_many([{"t": datetime(2024, 1, 1) + timedelta(seconds=i), "v": i} for i in range(1000)])
        results = []

        def read():
            results.append(sum(d["v"] for d in db.m.find({}, {"v": 1}).batch_size(64)))

        threads = [threading.Thread(target=read) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(results, [sum(range(1000))] * 16)
        self.assertGreater(self.client.admin.command("serverStatus")["connections"]["totalCreated"], 1)


if __name__ == "__main__":
    unittest.main()
