"""Writes and reads: insert with writeErrors, find and its cursors, aggregate, count, distinct,
raw buckets, meta-only update and delete."""

import unittest
from datetime import datetime, timedelta

from bson import Int64, ObjectId
from pymongo import ASCENDING, DESCENDING, InsertOne
from pymongo.errors import BulkWriteError, OperationFailure

from harness import ServerTestCase
from weather_data import second_sensor_documents, tutorial_documents

WEATHER_TS = {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"}
T0 = datetime(2024, 3, 1)


class InsertTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.coll = self.db.create_collection("weather", timeseries=WEATHER_TS)

    def batch(self):
        return [
            {"timestamp": T0, "metadata": {"sensorId": 1}, "temp": 1},
            {"metadata": {"sensorId": 1}, "temp": 2},  # no time field
            {"timestamp": T0 + timedelta(hours=1), "metadata": {"sensorId": 1}, "temp": 3},
            {"timestamp": "2024-03-01T02:00:00Z", "metadata": {"sensorId": 1}, "temp": 4},  # a string
            {"timestamp": T0 + timedelta(hours=2), "metadata": {"sensorId": 1}, "temp": 5},
        ]

    def test_insert_one_and_ids(self):
        r = self.coll.insert_one({"timestamp": T0, "metadata": {"sensorId": 1}, "temp": 1})
        self.assertIsInstance(r.inserted_id, ObjectId)
        own = {"_id": "mine", "timestamp": T0, "metadata": {"sensorId": 2}, "temp": 2}
        self.assertEqual(self.coll.insert_one(own).inserted_id, "mine")
        self.assertEqual(self.coll.find_one({"_id": r.inserted_id})["temp"], 1)
        self.assertEqual(self.coll.find_one({"_id": "mine"}), own)

    def test_ordered_insert_stops_at_first_error(self):
        with self.assertRaises(BulkWriteError) as cm:
            self.coll.insert_many(self.batch(), ordered=True)
        d = cm.exception.details
        self.assertEqual(d["nInserted"], 1)
        self.assertEqual(len(d["writeErrors"]), 1)
        self.assertEqual(d["writeErrors"][0]["index"], 1)
        self.assertEqual(d["writeErrors"][0]["code"], 2)
        self.assertIn("timestamp", d["writeErrors"][0]["errmsg"])
        self.assertEqual([x["temp"] for x in self.coll.find()], [1])

    def test_unordered_insert_reports_each_error(self):
        with self.assertRaises(BulkWriteError) as cm:
            self.coll.insert_many(self.batch(), ordered=False)
        d = cm.exception.details
        self.assertEqual(d["nInserted"], 3)
        self.assertEqual([e["index"] for e in d["writeErrors"]], [1, 3])
        self.assertEqual([e["code"] for e in d["writeErrors"]], [2, 2])
        self.assertEqual(sorted(x["temp"] for x in self.coll.find()), [1, 3, 5])

    def test_bulk_write_unordered(self):
        ops = [InsertOne(d) for d in self.batch()]
        with self.assertRaises(BulkWriteError) as cm:
            self.coll.bulk_write(ops, ordered=False)
        self.assertEqual(cm.exception.details["nInserted"], 3)
        self.assertEqual([e["index"] for e in cm.exception.details["writeErrors"]], [1, 3])

    def test_raw_insert_command_reply(self):
        r = self.db.command(
            "insert",
            "weather",
            documents=[{"timestamp": T0, "temp": 1}, {"temp": 2}, {"timestamp": T0, "temp": 3}],
            ordered=False,
        )
        self.assertEqual(r["ok"], 1.0)
        self.assertEqual(r["n"], 2)
        self.assertEqual(len(r["writeErrors"]), 1)
        self.assertEqual(r["writeErrors"][0]["index"], 1)
        self.assertEqual(r["writeErrors"][0]["code"], 2)

    def test_large_insert_many(self):
        # More documents than pymongo puts in one message batch of a small size: many batches.
        docs = [{"timestamp": T0 + timedelta(seconds=i), "metadata": {"sensorId": i % 3}, "v": i, "pad": "x" * 200} for i in range(20000)]
        r = self.coll.insert_many(docs)
        self.assertEqual(len(r.inserted_ids), 20000)
        self.assertEqual(self.coll.count_documents({}), 20000)
        self.assertEqual(self.coll.count_documents({"metadata.sensorId": 2}), 6666)


class FindTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.coll = self.db.create_collection("weather", timeseries=WEATHER_TS)
        self.docs = tutorial_documents() + second_sensor_documents()
        self.coll.insert_many(self.docs)

    def test_filter_projection_sort_skip_limit(self):
        got = list(
            self.coll.find({"temp": {"$gte": 12}}, {"_id": 0, "temp": 1, "metadata.sensorId": 1})
            .sort([("temp", DESCENDING), ("metadata.sensorId", ASCENDING)])
            .skip(2)
            .limit(5)
        )
        everything = sorted(
            ({"metadata": {"sensorId": d["metadata"]["sensorId"]}, "temp": d["temp"]} for d in self.docs if d["temp"] >= 12),
            key=lambda d: (-d["temp"], d["metadata"]["sensorId"]),
        )
        self.assertEqual(got, everything[2:7])
        for d in got:
            self.assertEqual(list(d), ["metadata", "temp"])

    def test_exclusion_projection(self):
        got = self.coll.find_one({"metadata.sensorId": 5579}, {"metadata": 0, "_id": 0}, sort=[("timestamp", 1)])
        self.assertEqual(got, {"timestamp": datetime(2021, 5, 18, 2), "temp": 20})

    def test_sort_by_time_descending(self):
        got = [d["timestamp"] for d in self.coll.find({}, {"timestamp": 1}).sort("timestamp", -1)]
        self.assertEqual(got, sorted((d["timestamp"] for d in self.docs), reverse=True))

    def test_time_range_and_in(self):
        got = self.coll.count_documents(
            {"timestamp": {"$gt": datetime(2021, 5, 18, 4), "$lte": datetime(2021, 5, 19)}, "metadata.sensorId": {"$in": [5578, 1]}}
        )
        self.assertEqual(got, 5)  # 8h, 12h, 16h, 20h and the 19th at 0h
        got = list(self.coll.find({"metadata": {"sensorId": 5579, "type": "temperature"}}))
        self.assertEqual(len(got), 6)
        got = list(self.coll.find({"$or": [{"temp": 25}, {"temp": 17}]}, {"_id": 0, "temp": 1}).sort("temp", 1))
        self.assertEqual(got, [{"temp": 17}, {"temp": 25}])

    def test_find_on_missing_collection_returns_nothing(self):
        self.assertEqual(list(self.db.nothing.find({"a": 1})), [])
        self.assertEqual(list(self.client.nodb.nothing.find()), [])
        self.assertIsNone(self.db.nothing.find_one())
        self.assertEqual(self.db.nothing.count_documents({}), 0)
        self.assertEqual(list(self.db.nothing.aggregate([{"$match": {}}])), [])
        self.assertEqual(self.db.nothing.distinct("a"), [])

    def test_count_command_and_count_documents(self):
        r = self.db.command("count", "weather")
        self.assertEqual(r["n"], 18)
        r = self.db.command("count", "weather", query={"metadata.sensorId": 5578})
        self.assertEqual(r["n"], 12)
        r = self.db.command("count", "weather", query={"metadata.sensorId": 5578}, skip=2, limit=5)
        self.assertEqual(r["n"], 5)
        r = self.db.command("count", "weather", query={"metadata.sensorId": 5578}, skip=10)
        self.assertEqual(r["n"], 2)
        self.assertEqual(self.coll.count_documents({"temp": 12}), 5)
        self.assertEqual(self.coll.count_documents({}, skip=3, limit=4), 4)
        self.assertEqual(self.db.command("count", "nothing")["n"], 0)

    def test_distinct(self):
        self.assertEqual(self.coll.distinct("metadata.sensorId"), [5578, 5579])
        self.assertEqual(self.coll.distinct("metadata.type"), ["temperature"])
        self.assertEqual(self.coll.distinct("temp", {"temp": {"$gt": 16}}), [17, 20, 21, 22, 23, 24, 25])
        r = self.db.command("distinct", "weather", key="metadata", query={"metadata.sensorId": 5578})
        self.assertEqual(r["values"], [{"sensorId": 5578, "type": "temperature"}])


class CursorTest(ServerTestCase):
    N = 5000

    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.coll = self.db.create_collection("m", timeseries={"timeField": "t", "metaField": "s"})
        # Out of time order, over several series.
        self.coll.insert_many(
            [{"_id": i, "t": T0 + timedelta(seconds=(i * 7919) % self.N), "s": i % 4, "v": (i * 7919) % self.N} for i in range(self.N)]
        )

    def test_many_batches_in_sort_order(self):
        cursor = self.coll.find({}, {"_id": 1, "v": 1}).sort("v", 1).batch_size(100)
        got = list(cursor)
        self.assertEqual(len(got), self.N)
        self.assertEqual([d["v"] for d in got], list(range(self.N)))
        self.assertEqual(len({d["_id"] for d in got}), self.N)

    def test_many_batches_by_time_descending(self):
        got = [d["t"] for d in self.coll.find({}, {"t": 1}).sort("t", -1).batch_size(100)]
        self.assertEqual(got, [T0 + timedelta(seconds=s) for s in range(self.N - 1, -1, -1)])

    def test_unsorted_every_document_once(self):
        got = [d["_id"] for d in self.coll.find({}, {"_id": 1}).batch_size(333)]
        self.assertEqual(sorted(got), list(range(self.N)))

    def test_limit_across_batches(self):
        got = list(self.coll.find({"s": 1}).sort("v", 1).batch_size(100).limit(250))
        self.assertEqual(len(got), 250)
        expected = sorted(v for v in ((i * 7919) % self.N for i in range(self.N)) if True)
        expected = sorted((i * 7919) % self.N for i in range(self.N) if i % 4 == 1)[:250]
        self.assertEqual([d["v"] for d in got], expected)

    def test_raw_find_get_more_and_kill_cursors(self):
        r = self.db.command("find", "m", filter={}, sort={"v": 1}, batchSize=10)
        c = r["cursor"]
        self.assertEqual(c["ns"], "test.m")
        self.assertEqual(len(c["firstBatch"]), 10)
        self.assertNotEqual(c["id"], 0)
        cid = c["id"]
        r = self.db.command("getMore", cid, collection="m", batchSize=20)
        self.assertEqual(r["cursor"]["id"], cid)
        self.assertEqual([d["v"] for d in r["cursor"]["nextBatch"]], list(range(10, 30)))
        r = self.db.command("killCursors", "m", cursors=[cid])
        self.assertEqual(r["cursorsKilled"], [cid])
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("getMore", cid, collection="m")
        self.assertEqual(cm.exception.code, 43)
        self.assertEqual(cm.exception.details["codeName"], "CursorNotFound")
        r = self.db.command("killCursors", "m", cursors=[cid])
        self.assertEqual(r["cursorsNotFound"], [cid])

    def test_closing_a_cursor_early_kills_it(self):
        cursor = self.coll.find({}).sort("v", 1).batch_size(100)
        first = [next(cursor) for _ in range(150)]
        self.assertEqual([d["v"] for d in first], list(range(150)))
        cid = cursor.cursor_id
        self.assertTrue(cid)
        cursor.close()  # pymongo sends killCursors
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("getMore", cid, collection="m")
        self.assertEqual(cm.exception.code, 43)

    def test_get_more_on_unknown_id(self):
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("getMore", Int64(1234567), collection="m")
        self.assertEqual(cm.exception.code, 43)

    def test_aggregate_batches(self):
        got = list(self.coll.aggregate([{"$match": {"s": {"$in": [0, 2]}}}, {"$sort": {"v": -1}}], batchSize=50, allowDiskUse=True))
        expected = sorted(((i * 7919) % self.N for i in range(self.N) if i % 2 == 0), reverse=True)
        self.assertEqual([d["v"] for d in got], expected)
        r = self.db.command("aggregate", "m", pipeline=[{"$sort": {"v": 1}}], cursor={"batchSize": 7}, allowDiskUse=True)
        self.assertEqual(len(r["cursor"]["firstBatch"]), 7)
        self.assertNotEqual(r["cursor"]["id"], 0)
        r2 = self.db.command("getMore", r["cursor"]["id"], collection="m", batchSize=3)
        self.assertEqual([d["v"] for d in r2["cursor"]["nextBatch"]], [7, 8, 9])
        self.db.command("killCursors", "m", cursors=[r["cursor"]["id"]])
        r = self.db.command("aggregate", "m", pipeline=[{"$count": "n"}], cursor={})
        self.assertEqual(r["cursor"]["firstBatch"], [{"n": self.N}])
        self.assertEqual(r["cursor"]["id"], 0)

    def test_aggregate_needs_cursor(self):
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("aggregate", "m", pipeline=[])
        self.assertEqual(cm.exception.code, 9)


class AggregateTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.coll = self.db.create_collection("weather", timeseries=WEATHER_TS)
        self.coll.insert_many(tutorial_documents() + second_sensor_documents())

    def test_group_sort_project(self):
        got = list(
            self.coll.aggregate(
                [
                    {"$match": {"metadata.type": "temperature"}},
                    {"$group": {"_id": "$metadata.sensorId", "avg": {"$avg": "$temp"}, "max": {"$max": "$temp"}, "n": {"$count": {}}}},
                    {"$sort": {"avg": -1}},
                    {"$project": {"sensor": "$_id", "_id": 0, "avg": 1, "max": 1, "n": 1}},
                ]
            )
        )
        self.assertEqual(
            got,
            [
                {"avg": 22.5, "max": 25, "n": 6, "sensor": 5579},
                {"avg": 77 / 6, "max": 17, "n": 12, "sensor": 5578},
            ],
        )

    def test_skip_limit_count(self):
        got = list(self.coll.aggregate([{"$sort": {"timestamp": 1, "temp": 1}}, {"$skip": 3}, {"$limit": 2}, {"$project": {"_id": 0, "temp": 1}}]))
        self.assertEqual(got, [{"temp": 11}, {"temp": 21}])
        self.assertEqual(list(self.coll.aggregate([{"$match": {"temp": {"$lt": 12}}}, {"$count": "c"}])), [{"c": 3}])

    def test_unsupported_stage_is_an_error(self):
        with self.assertRaises(OperationFailure):
            list(self.coll.aggregate([{"$lookup": {"from": "x", "localField": "a", "foreignField": "b", "as": "c"}}]))

    def test_explain_aggregate(self):
        r = self.db.command("aggregate", "weather", pipeline=[{"$match": {"metadata.sensorId": 5578}}], explain=True)
        self.assertEqual(r["ok"], 1.0)
        self.assertEqual(r["queryPlanner"]["namespace"], "test.weather")
        self.assertIn("winningPlan", r["queryPlanner"])
        self.assertNotIn("cursor", r)

    def test_explain_find(self):
        r = self.db.command("explain", {"find": "weather", "filter": {"metadata.sensorId": 5578, "timestamp": {"$gte": datetime(2021, 5, 19)}}})
        self.assertEqual(r["ok"], 1.0)
        self.assertEqual(r["queryPlanner"]["namespace"], "test.weather")
        self.assertIn("winningPlan", r["queryPlanner"])
        self.assertIn("executionStats", r)
        r = self.coll.find({"metadata.sensorId": 5578}).explain()
        self.assertIn("queryPlanner", r)
        r = self.db.command("explain", {"count": "weather", "query": {"metadata.sensorId": 5578}})
        self.assertEqual(r["ok"], 1.0)


class RawBucketsTest(ServerTestCase):
    def test_find_and_aggregate_raw_buckets(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents() + second_sensor_documents())
        buckets = list(db["system.buckets.weather"].find())
        self.assertEqual(len(buckets), 2)  # one per sensor: every time within 30 days
        for b in buckets:
            self.assertEqual(set(b) - {"control"}, {"_id", "meta", "data"})
            self.assertIsInstance(b["_id"], ObjectId)
            self.assertIn(b["control"]["version"], (1, 2))
            self.assertIn("min", b["control"])
            self.assertIn("max", b["control"])
            # The bucket start: rounded down to the day (granularity hours).
            self.assertEqual(b["control"]["min"]["timestamp"], datetime(2021, 5, 18))
            self.assertEqual(b["_id"].generation_time.replace(tzinfo=None), datetime(2021, 5, 18))
        by_meta = {b["meta"]["sensorId"]: b for b in buckets}
        b = by_meta[5578]
        self.assertEqual(b["meta"], {"sensorId": 5578, "type": "temperature"})
        self.assertEqual(b["control"]["max"]["timestamp"], datetime(2021, 5, 19, 20))
        self.assertEqual(b["control"]["min"]["temp"], 11)
        self.assertEqual(b["control"]["max"]["temp"], 17)
        self.assertEqual(len(b["data"]["temp"]), 12)
        self.assertEqual([b["data"]["temp"][str(i)] for i in range(12)], [12, 11, 11, 12, 16, 15, 13, 12, 11, 12, 17, 12])
        self.assertNotIn("metadata", b["data"])

        got = list(db["system.buckets.weather"].find({"meta.sensorId": 5579}))
        self.assertEqual([x["meta"]["sensorId"] for x in got], [5579])
        got = list(db["system.buckets.weather"].aggregate([{"$match": {"meta.sensorId": 5578}}]))
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0]["_id"], by_meta[5578]["_id"])
        got = list(db["system.buckets.weather"].aggregate([{"$match": {}}, {"$count": "n"}]))
        self.assertEqual(got, [{"n": 2}])
        self.assertEqual(db.command("count", "system.buckets.weather")["n"], 2)

    def test_find_raw_buckets_with_sort_and_projection(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents() + second_sensor_documents())
        by_meta = {b["meta"]["sensorId"]: b for b in db["system.buckets.weather"].find()}
        got = list(db["system.buckets.weather"].find({}, sort=[("meta.sensorId", 1)]).skip(1))
        self.assertEqual([x["meta"]["sensorId"] for x in got], [5579])
        got = list(db["system.buckets.weather"].find({}, sort=[("meta.sensorId", -1)]))
        self.assertEqual([x["meta"]["sensorId"] for x in got], [5579, 5578])
        got = list(db["system.buckets.weather"].find({}, {"meta": 1}, sort=[("meta.sensorId", -1)]).limit(1))
        self.assertEqual(got, [{"_id": by_meta[5579]["_id"], "meta": by_meta[5579]["meta"]}])

    def test_count_documents_on_raw_buckets(self):
        # pymongo's count_documents is an aggregate: [{$match}, {$group: {_id: 1, n: {$sum: 1}}}].
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents() + second_sensor_documents())
        self.assertEqual(db["system.buckets.weather"].count_documents({}), 2)
        self.assertEqual(db["system.buckets.weather"].count_documents({"meta.sensorId": 5578}), 1)


class MetaWriteTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.coll = self.db.create_collection("weather", timeseries=WEATHER_TS)
        self.coll.insert_many(tutorial_documents() + second_sensor_documents())

    def test_update_meta(self):
        r = self.coll.update_many({"metadata.sensorId": 5579}, {"$set": {"metadata.type": "humidity"}})
        self.assertEqual(r.matched_count, 6)
        self.assertEqual(r.modified_count, 6)
        self.assertEqual(self.coll.count_documents({"metadata.type": "humidity"}), 6)
        self.assertEqual(self.coll.count_documents({"metadata.type": "temperature"}), 12)
        # The measurements are untouched.
        self.assertEqual(sorted(d["temp"] for d in self.coll.find({"metadata.type": "humidity"})), [20, 21, 22, 23, 24, 25])

    def test_update_of_a_measurement_field_is_refused(self):
        with self.assertRaises(OperationFailure) as cm:
            self.coll.update_many({"metadata.sensorId": 5579}, {"$set": {"temp": 0}})
        self.assertEqual(cm.exception.code, 72)
        # A filter on a measurement field is refused too.
        with self.assertRaises(OperationFailure) as cm:
            self.coll.update_many({"temp": 20}, {"$set": {"metadata.type": "x"}})
        self.assertEqual(cm.exception.code, 72)
        # Nothing changed.
        self.assertEqual(self.coll.count_documents({"temp": 0}), 0)
        self.assertEqual(self.coll.count_documents({"metadata.type": "temperature"}), 18)

    def test_update_one_and_upsert_refused(self):
        with self.assertRaises(OperationFailure) as cm:
            self.coll.update_one({"metadata.sensorId": 5579}, {"$set": {"metadata.type": "x"}})
        self.assertEqual(cm.exception.code, 72)
        with self.assertRaises(OperationFailure) as cm:
            self.coll.update_many({"metadata.sensorId": 1}, {"$set": {"metadata.type": "x"}}, upsert=True)
        self.assertEqual(cm.exception.code, 72)

    def test_delete_many_on_meta(self):
        r = self.coll.delete_many({"metadata.sensorId": 5578})
        self.assertEqual(r.deleted_count, 12)
        self.assertEqual(self.coll.count_documents({}), 6)
        self.assertEqual(self.coll.delete_many({"metadata.sensorId": 5578}).deleted_count, 0)
        self.assertEqual(self.coll.delete_many({}).deleted_count, 6)
        self.assertEqual(self.coll.count_documents({}), 0)

    def test_delete_on_measurement_field_refused(self):
        with self.assertRaises(OperationFailure) as cm:
            self.coll.delete_many({"temp": 12})
        self.assertEqual(cm.exception.code, 72)
        self.assertEqual(self.coll.count_documents({}), 18)

    def test_delete_one_refused(self):
        with self.assertRaises(OperationFailure) as cm:
            self.coll.delete_one({"metadata.sensorId": 5578})
        self.assertEqual(cm.exception.code, 20)
        self.assertIn("non-multi", str(cm.exception))
        self.assertEqual(self.coll.count_documents({}), 18)

    def test_write_errors_per_statement(self):
        r = self.db.command(
            "delete",
            "weather",
            deletes=[{"q": {"metadata.sensorId": 5579}, "limit": 0}, {"q": {"temp": 1}, "limit": 0}, {"q": {"metadata.sensorId": 5578}, "limit": 0}],
            ordered=False,
        )
        self.assertEqual(r["n"], 18)
        self.assertEqual([(e["index"], e["code"]) for e in r["writeErrors"]], [(1, 72)])


class IndexTest(ServerTestCase):
    def test_create_list_drop(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents() + second_sensor_documents())
        self.assertEqual(list(coll.list_indexes()), [])
        self.assertEqual(coll.create_index([("metadata.sensorId", 1)]), "metadata.sensorId_1")
        self.assertEqual(coll.create_index([("metadata.sensorId", 1), ("timestamp", -1)]), "metadata.sensorId_1_timestamp_-1")
        self.assertEqual(coll.create_index([("temp", 1)], name="by_temp"), "by_temp")
        info = coll.index_information()
        self.assertEqual(info["metadata.sensorId_1"]["key"], [("metadata.sensorId", 1)])
        self.assertEqual(info["metadata.sensorId_1_timestamp_-1"]["key"], [("metadata.sensorId", 1), ("timestamp", -1)])
        self.assertEqual(set(info), {"metadata.sensorId_1", "metadata.sensorId_1_timestamp_-1", "by_temp"})
        # Creating one again changes nothing.
        r = db.command("createIndexes", "weather", indexes=[{"key": {"metadata.sensorId": 1}, "name": "metadata.sensorId_1"}])
        self.assertEqual(r["numIndexesBefore"], r["numIndexesAfter"])
        # The bucket form.
        raw = {i["name"]: i for i in db["system.buckets.weather"].list_indexes()}
        self.assertEqual(dict(raw["metadata.sensorId_1"]["key"]), {"meta.sensorId": 1})
        # Queries still answer through the index.
        self.assertEqual(coll.count_documents({"metadata.sensorId": 5579}), 6)
        coll.drop_index("metadata.sensorId_1")
        self.assertEqual(set(coll.index_information()), {"metadata.sensorId_1_timestamp_-1", "by_temp"})
        # By key pattern (pymongo's drop_index turns a key list into a name; the command takes
        # the pattern itself).
        r = db.command("dropIndexes", "weather", index={"temp": 1})
        self.assertEqual(r["nIndexesWas"], 2)
        self.assertEqual(set(coll.index_information()), {"metadata.sensorId_1_timestamp_-1"})
        with self.assertRaises(OperationFailure) as cm:
            coll.drop_index("nope_1")
        self.assertEqual(cm.exception.code, 27)
        coll.create_index([("metadata.type", 1)])
        coll.drop_indexes()  # index: "*"
        self.assertEqual(list(coll.list_indexes()), [])
        self.assertEqual(coll.count_documents({"metadata.sensorId": 5579}), 6)

    def test_refused_indexes(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        for keys, options in (([("metadata.sensorId", 1)], {"unique": True}), ([("metadata.type", "text")], {})):
            with self.subTest(keys=keys, options=options):
                with self.assertRaises(OperationFailure) as cm:
                    coll.create_index(keys, **options)
                self.assertIn(cm.exception.code, (67, 72))
        self.assertEqual(list(coll.list_indexes()), [])

    def test_index_on_missing_collection(self):
        with self.assertRaises(OperationFailure) as cm:
            self.client.test.nothing.create_index([("a", 1)])
        self.assertEqual(cm.exception.code, 26)


class StatsTest(ServerTestCase):
    def test_coll_stats(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents())
        coll.insert_many(second_sensor_documents())
        s = db.command("collStats", "weather")
        self.assertEqual(s["ok"], 1.0)
        self.assertEqual(s["ns"], "test.weather")
        self.assertEqual(s["count"], 18)
        ts = s["timeseries"]
        self.assertEqual(ts["bucketsNs"], "test.system.buckets.weather")
        self.assertEqual(ts["bucketCount"], 2)
        self.assertEqual(ts["numBucketInserts"], 2)
        self.assertEqual(ts["numBucketsOpenedDueToMetadata"], 2)
        self.assertEqual(ts["numMeasurementsCommitted"], 18)
        self.assertEqual(ts["numCommits"], 2)
        for key in (
            "numBucketUpdates",
            "numBucketsClosedDueToCount",
            "numBucketsClosedDueToSize",
            "numBucketsClosedDueToTimeForward",
            "numBucketsClosedDueToTimeBackward",
            "numBucketsClosedDueToMemoryThreshold",
            "numBucketsClosedDueToSchemaChange",
            "avgBucketSize",
            "avgNumMeasurementsPerCommit",
        ):
            self.assertIn(key, ts)
        with self.assertRaises(OperationFailure) as cm:
            db.command("collStats", "nothing")
        self.assertEqual(cm.exception.code, 26)

    def test_time_forward_counter(self):
        db = self.client.test
        coll = db.create_collection("m", timeseries={"timeField": "t", "metaField": "s"})
        # granularity seconds: a bucket spans one hour from its start; 70 minutes apart, each
        # measurement closes the bucket before it.
        coll.insert_many([{"t": T0 + timedelta(minutes=70 * i), "s": 1} for i in range(4)])
        ts = db.command("collStats", "m")["timeseries"]
        self.assertEqual(ts["bucketCount"], 4)
        self.assertEqual(ts["numBucketsClosedDueToTimeForward"], 3)
        self.assertEqual(ts["numBucketsOpenedDueToMetadata"], 1)

    def test_coll_stats_stage(self):
        db = self.client.test
        coll = db.create_collection("weather", timeseries=WEATHER_TS)
        coll.insert_many(tutorial_documents())
        got = list(coll.aggregate([{"$collStats": {"storageStats": {}}}]))
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0]["ns"], "test.weather")
        st = got[0]["storageStats"]
        self.assertEqual(st["count"], 12)
        self.assertEqual(st["timeseries"]["bucketCount"], 1)
        self.assertEqual(st["timeseries"]["numMeasurementsCommitted"], 12)


if __name__ == "__main__":
    unittest.main()
