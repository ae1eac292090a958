"""Differential: what pymongo gets through the server equals what the Rust API gives for the
same data and queries (through the `tsbucket` CLI, which calls the Rust API, reading the same
database directory beside the running server)."""

import json
import os
import random
import unittest
from datetime import datetime, timedelta

from harness import ServerTestCase, cli, cli_json_lines, relaxed

T0 = datetime(2024, 2, 27, 22)
SENSORS = ["a", "b", "c", "d"]


def dataset():
    rnd = random.Random(20240301)
    docs = []
    for i in range(3000):
        s = SENSORS[i % 4]
        docs.append(
            {
                "_id": i,
                "ts": T0 + timedelta(minutes=7 * i + rnd.randint(0, 5)),
                "meta": {"sensor": s, "site": "north" if s in "ab" else "south"},
                "temp": round(rnd.uniform(-10, 35), 2),
                "hum": rnd.randint(0, 100),
            }
        )
        if i % 97 == 0:
            docs[-1]["alarm"] = True  # a sparse field
    rnd.shuffle(docs)
    return docs


FILTERS = [
    {"meta.sensor": "b"},
    {"ts": {"$gte": datetime(2024, 2, 29), "$lt": datetime(2024, 3, 2, 12)}},
    {"meta.site": "south", "ts": {"$gte": datetime(2024, 3, 3)}, "temp": {"$gt": 20}},
    {"alarm": True},
]

PIPELINES = [
    [
        {"$match": {"meta.site": "north"}},
        {"$group": {"_id": "$meta.sensor", "avg": {"$avg": "$temp"}, "max": {"$max": "$temp"}, "n": {"$sum": 1}}},
        {"$sort": {"_id": 1}},
    ],
    [
        {"$match": {"ts": {"$lt": datetime(2024, 3, 5)}}},
        {"$group": {"_id": {"day": {"$dateTrunc": {"date": "$ts", "unit": "day"}}, "site": "$meta.site"}, "min": {"$min": "$hum"}, "avg": {"$avg": "$hum"}}},
        {"$sort": {"_id.day": 1, "_id.site": 1}},
    ],
    [{"$sort": {"temp": -1, "_id": 1}}, {"$limit": 25}, {"$project": {"_id": 1, "temp": 1, "meta.sensor": 1}}],
    [{"$match": {"meta.sensor": {"$in": ["a", "d"]}}}, {"$count": "n"}],
]


def ejson(value):
    return json.dumps(relaxed(value))


class DifferentialTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.diff
        self.db.create_collection("weather", timeseries={"timeField": "ts", "metaField": "meta", "granularity": "hours"})
        self.db.weather.insert_many(dataset())
        self.path = os.path.join(self.server.dir, "diff")

    def check_filters(self):
        for f in FILTERS:
            with self.subTest(filter=f):
                # Sorted by _id on both sides, so that the comparison is of sets in one order.
                ours = [relaxed(d) for d in self.db.weather.find(f).sort("_id", 1)]
                theirs = cli_json_lines("find", self.path, "weather", ejson(f), "--sort", '{"_id": 1}')
                self.assertGreater(len(ours), 0)
                self.assertEqual(ours, theirs)
                n = int(cli("count", self.path, "weather", ejson(f)).strip().split()[0])
                self.assertEqual(self.db.weather.count_documents(f), n)
                self.assertEqual(n, len(ours))

    def check_sort_limit(self):
        f = {"meta.sensor": {"$ne": "c"}}
        ours = [relaxed(d) for d in self.db.weather.find(f, {"_id": 0, "ts": 1, "temp": 1}).sort([("ts", -1)]).skip(10).limit(40)]
        theirs = cli_json_lines(
            "find", self.path, "weather", ejson(f), "--projection", '{"_id": 0, "ts": 1, "temp": 1}', "--sort", '{"ts": -1}', "--skip", "10", "--limit", "40"
        )
        self.assertEqual(len(ours), 40)
        self.assertEqual(ours, theirs)

    def check_pipelines(self):
        for p in PIPELINES:
            with self.subTest(pipeline=p):
                ours = [relaxed(d) for d in self.db.weather.aggregate(p)]
                theirs = cli_json_lines("aggregate", self.path, "weather", ejson(p))
                self.assertGreater(len(ours), 0)
                self.assertEqual(ours, theirs)

    def test_same_answers_while_server_runs(self):
        self.check_filters()
        self.check_sort_limit()
        self.check_pipelines()

    def test_same_answers_after_server_stops(self):
        # The server's answers first, then the CLI's on the directory it left.
        ours_f = [[relaxed(d) for d in self.db.weather.find(f).sort("_id", 1)] for f in FILTERS]
        ours_p = [[relaxed(d) for d in self.db.weather.aggregate(p)] for p in PIPELINES]
        self.server.stop()
        for f, ours in zip(FILTERS, ours_f):
            with self.subTest(filter=f):
                self.assertEqual(ours, cli_json_lines("find", self.path, "weather", ejson(f), "--sort", '{"_id": 1}'))
        for p, ours in zip(PIPELINES, ours_p):
            with self.subTest(pipeline=p):
                self.assertEqual(ours, cli_json_lines("aggregate", self.path, "weather", ejson(p)))


if __name__ == "__main__":
    unittest.main()
