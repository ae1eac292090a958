"""The server and DDL commands: handshake, admin, create, listCollections, drop, collMod."""

import unittest
from datetime import datetime

from bson import Int64
from pymongo.errors import OperationFailure

from harness import ServerTestCase

WEATHER_TS = {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"}


class HandshakeTest(ServerTestCase):
    def test_first_line(self):
        line = self.server.first_line
        self.assertTrue(line.startswith("tsbucket serve: listening on 127.0.0.1:"), line)
        self.assertIn("(no authentication)", line)
        self.assertIn(self.server.dir, line)

    def test_hello(self):
        for name in ("hello", "isMaster", "ismaster"):
            with self.subTest(command=name):
                r = self.client.admin.command(name)
                self.assertEqual(r["ok"], 1.0)
                self.assertIs(r["isWritablePrimary"], True)
                self.assertGreaterEqual(r["maxWireVersion"], 17)  # pymongo 4.x needs >= 7; 7.0 is 21
                self.assertEqual(r["maxWireVersion"], 21)
                self.assertEqual(r["minWireVersion"], 0)
                self.assertEqual(r["maxBsonObjectSize"], 16 * 1024 * 1024)
                self.assertEqual(r["maxMessageSizeBytes"], 48_000_000)
                self.assertEqual(r["maxWriteBatchSize"], 100_000)
                self.assertIsInstance(r["localTime"], datetime)
                self.assertIn("logicalSessionTimeoutMinutes", r)
        self.assertIs(self.client.admin.command("isMaster")["ismaster"], True)
        self.assertNotIn("ismaster", self.client.admin.command("hello"))

    def test_driver_sees_standalone_primary(self):
        self.client.admin.command("ping")
        self.assertTrue(self.client.is_primary)
        self.assertEqual(self.client.address, ("127.0.0.1", self.server.port))
        self.assertEqual(self.client.topology_description.topology_type_name, "Single")

    def test_ping_build_host_info(self):
        self.assertEqual(self.client.admin.command("ping"), {"ok": 1.0})
        self.assertEqual(self.client.test.command("ping")["ok"], 1.0)
        info = self.client.server_info()
        self.assertEqual(info["version"], "7.0.0")
        self.assertEqual(info["versionArray"][:3], [7, 0, 0])
        self.assertEqual(info["maxBsonObjectSize"], 16 * 1024 * 1024)
        self.assertEqual(self.client.admin.command("buildinfo")["version"], "7.0.0")
        host = self.client.admin.command("hostInfo")
        self.assertEqual(host["ok"], 1.0)
        self.assertGreaterEqual(host["system"]["numCores"], 1)
        self.assertIn("os", host)

    def test_get_parameter(self):
        r = self.client.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
        self.assertEqual(r["featureCompatibilityVersion"], {"version": "7.0"})
        r = self.client.admin.command({"getParameter": "*"})
        self.assertIn("featureCompatibilityVersion", r)
        with self.assertRaises(OperationFailure) as cm:
            self.client.admin.command({"getParameter": 1, "noSuchParameterAtAll": 1})
        self.assertEqual(cm.exception.code, 72)

    def test_end_sessions_on_close(self):
        # pymongo sends endSessions when a client that used sessions closes.
        with self.client.start_session() as s:
            self.client.admin.command("ping", session=s)
            session_id = s.session_id
        r = self.client.admin.command("endSessions", [session_id])
        self.assertEqual(r["ok"], 1.0)
        self.client.close()
        # The server is still there for a new client.
        c = self.server.client()
        self.assertEqual(c.admin.command("ping")["ok"], 1.0)


class DatabaseTest(ServerTestCase):
    def test_list_and_drop_databases(self):
        self.assertEqual(self.client.list_database_names(), [])
        for name in ("alpha", "beta"):
            self.client[name].create_collection("m", timeseries={"timeField": "t"})
        self.assertEqual(sorted(self.client.list_database_names()), ["alpha", "beta"])
        full = self.client.admin.command("listDatabases")
        self.assertEqual(full["ok"], 1.0)
        by_name = {d["name"]: d for d in full["databases"]}
        self.assertEqual(sorted(by_name), ["alpha", "beta"])
        for d in by_name.values():
            self.assertIn("sizeOnDisk", d)
            self.assertIs(d["empty"], False)
        self.assertIn("totalSize", full)
        names_only = self.client.admin.command("listDatabases", nameOnly=True)
        self.assertEqual(sorted(d["name"] for d in names_only["databases"]), ["alpha", "beta"])
        for d in names_only["databases"]:
            self.assertEqual(set(d), {"name"})
        filtered = self.client.admin.command("listDatabases", nameOnly=True, filter={"name": "beta"})
        self.assertEqual([d["name"] for d in filtered["databases"]], ["beta"])

        r = self.client.alpha.command("dropDatabase")
        self.assertEqual(r["ok"], 1.0)
        self.assertEqual(self.client.list_database_names(), ["beta"])
        self.client.drop_database("beta")
        self.assertEqual(self.client.list_database_names(), [])
        # Dropping a missing database is not an error.
        self.assertEqual(self.client.nothere.command("dropDatabase")["ok"], 1.0)

    def test_dropped_database_can_be_recreated(self):
        db = self.client.test
        db.create_collection("weather", timeseries=WEATHER_TS)
        db.weather.insert_one({"timestamp": datetime(2021, 5, 18), "metadata": {"sensorId": 1}, "temp": 1})
        self.client.drop_database("test")
        self.assertEqual(list(db.weather.find()), [])
        db.create_collection("weather", timeseries=WEATHER_TS)
        self.assertEqual(db.weather.count_documents({}), 0)
        db.weather.insert_one({"timestamp": datetime(2021, 5, 18), "metadata": {"sensorId": 1}, "temp": 2})
        self.assertEqual([d["temp"] for d in db.weather.find()], [2])


class CreateTest(ServerTestCase):
    def test_create_with_granularity(self):
        db = self.client.test
        db.create_collection("weather", timeseries=WEATHER_TS)
        info = db.list_collections(filter={"name": "weather"}).next()
        self.assertEqual(info["type"], "timeseries")
        self.assertEqual(
            info["options"]["timeseries"],
            {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours", "bucketMaxSpanSeconds": 2592000},
        )
        self.assertNotIn("expireAfterSeconds", info["options"])

    def test_create_defaults_to_seconds(self):
        db = self.client.test
        db.command("create", "m", timeseries={"timeField": "t"})
        info = db.list_collections(filter={"name": "m"}).next()
        self.assertEqual(info["options"]["timeseries"], {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600})

    def test_create_with_custom_spans(self):
        db = self.client.test
        db.create_collection(
            "custom",
            timeseries={"timeField": "t", "metaField": "m", "bucketMaxSpanSeconds": 7200, "bucketRoundingSeconds": 7200},
        )
        info = db.list_collections(filter={"name": "custom"}).next()
        ts = info["options"]["timeseries"]
        self.assertEqual(ts["bucketMaxSpanSeconds"], 7200)
        self.assertEqual(ts["bucketRoundingSeconds"], 7200)
        self.assertNotIn("granularity", ts)
        # Measurements two hours apart (aligned) go to two buckets.
        db.custom.insert_many([{"t": datetime(2024, 1, 1, h), "m": 1, "v": h} for h in range(4)])
        buckets = list(db["system.buckets.custom"].find())
        self.assertEqual(len(buckets), 2)
        self.assertEqual(sorted(b["control"]["min"]["t"] for b in buckets), [datetime(2024, 1, 1, 0), datetime(2024, 1, 1, 2)])

    def test_create_with_expire_after_seconds(self):
        db = self.client.test
        db.create_collection("ttl", timeseries={"timeField": "t"}, expireAfterSeconds=86400)
        info = db.list_collections(filter={"name": "ttl"}).next()
        self.assertEqual(info["options"]["expireAfterSeconds"], 86400)

    def test_create_refusals(self):
        db = self.client.test
        with self.assertRaises(OperationFailure) as cm:
            db.create_collection("plain")
        self.assertEqual(cm.exception.code, 72)
        self.assertEqual(cm.exception.details["codeName"], "InvalidOptions")
        # Only one of the custom spans.
        with self.assertRaises(OperationFailure) as cm:
            db.create_collection("c1", timeseries={"timeField": "t", "bucketMaxSpanSeconds": 100})
        self.assertEqual(cm.exception.code, 72)
        # Spans together with granularity.
        with self.assertRaises(OperationFailure) as cm:
            db.create_collection(
                "c2",
                timeseries={"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 100},
            )
        self.assertEqual(cm.exception.code, 72)
        # An unknown granularity.
        with self.assertRaises(OperationFailure):
            db.create_collection("c3", timeseries={"timeField": "t", "granularity": "days"})
        # A wrong type of timeField: TypeMismatch.
        with self.assertRaises(OperationFailure) as cm:
            db.create_collection("c4", timeseries={"timeField": 100})
        self.assertEqual(cm.exception.code, 14)
        # An option a time-series collection cannot have.
        with self.assertRaises(OperationFailure) as cm:
            db.create_collection("c5", timeseries={"timeField": "t"}, capped=True, size=1000)
        self.assertEqual(cm.exception.code, 72)
        # An existing name: the same options again are fine (MongoDB's create is idempotent),
        # other options are NamespaceExists.
        db.create_collection("dup", timeseries={"timeField": "t"})
        self.assertEqual(db.command("create", "dup", timeseries={"timeField": "t"})["ok"], 1.0)
        with self.assertRaises(OperationFailure) as cm:
            db.command("create", "dup", timeseries={"timeField": "t", "metaField": "m"})
        self.assertEqual(cm.exception.code, 48)
        self.assertEqual(cm.exception.details["codeName"], "NamespaceExists")
        # None of the refused ones exist.
        self.assertEqual(db.list_collection_names(filter={"type": "timeseries"}), ["dup"])


class ListCollectionsTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.db.create_collection("weather", timeseries=WEATHER_TS, expireAfterSeconds=3600)
        self.db.create_collection("cpu", timeseries={"timeField": "t", "metaField": "tags"})

    def test_entries(self):
        entries = {e["name"]: e for e in self.db.list_collections()}
        self.assertEqual(set(entries), {"weather", "system.buckets.weather", "cpu", "system.buckets.cpu"})
        w = entries["weather"]
        self.assertEqual(w["type"], "timeseries")
        self.assertEqual(w["options"]["timeseries"]["timeField"], "timestamp")
        self.assertEqual(w["options"]["timeseries"]["metaField"], "metadata")
        self.assertEqual(w["options"]["timeseries"]["granularity"], "hours")
        self.assertEqual(w["options"]["expireAfterSeconds"], 3600)
        b = entries["system.buckets.weather"]
        self.assertEqual(b["type"], "collection")
        self.assertEqual(b["options"]["timeseries"]["timeField"], "timestamp")
        # As with MongoDB, the names include the bucket collections.
        self.assertEqual(
            sorted(self.db.list_collection_names()),
            ["cpu", "system.buckets.cpu", "system.buckets.weather", "weather"],
        )

    def test_filter_and_name_only(self):
        got = list(self.db.list_collections(filter={"type": "timeseries"}))
        self.assertEqual(sorted(e["name"] for e in got), ["cpu", "weather"])
        got = list(self.db.list_collections(filter={"options.timeseries.granularity": "hours", "type": "timeseries"}))
        self.assertEqual([e["name"] for e in got], ["weather"])
        r = self.db.command("listCollections", nameOnly=True)
        batch = r["cursor"]["firstBatch"]
        self.assertEqual(
            sorted((e["name"], e["type"]) for e in batch),
            [("cpu", "timeseries"), ("system.buckets.cpu", "collection"), ("system.buckets.weather", "collection"), ("weather", "timeseries")],
        )
        for e in batch:
            self.assertNotIn("options", e)
        r = self.db.command("listCollections", nameOnly=True, filter={"name": "weather"})
        self.assertEqual(r["cursor"]["firstBatch"], [{"name": "weather", "type": "timeseries"}])
        self.assertEqual(r["cursor"]["id"], 0)
        self.assertEqual(r["cursor"]["ns"], "test.$cmd.listCollections")
        self.assertEqual(self.db.list_collection_names(filter={"name": {"$in": ["cpu", "nope"]}}), ["cpu"])

    def test_missing_database_lists_nothing(self):
        self.assertEqual(list(self.client.nothere.list_collections()), [])


class DropTest(ServerTestCase):
    def test_drop(self):
        db = self.client.test
        db.create_collection("weather", timeseries=WEATHER_TS)
        db.weather.insert_one({"timestamp": datetime(2021, 5, 18), "metadata": {"sensorId": 1}, "temp": 1})
        r = db.command("drop", "weather")
        self.assertEqual(r["ok"], 1.0)
        self.assertEqual(r["ns"], "test.weather")
        self.assertEqual(db.list_collection_names(), [])
        self.assertEqual(list(db.list_collections()), [])
        self.assertEqual(list(db.weather.find()), [])
        # Dropping a missing collection is fine (MongoDB 7.0 replies ok).
        db.drop_collection("weather")
        db.drop_collection("never")
        # The name can be used again with other options.
        db.create_collection("weather", timeseries={"timeField": "ts"})
        self.assertEqual(db.list_collections(filter={"name": "weather"}).next()["options"]["timeseries"]["timeField"], "ts")


class CollModTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test

    def options(self, name):
        return self.db.list_collections(filter={"name": name}).next()["options"]

    def test_granularity_only_coarser(self):
        self.db.create_collection("m", timeseries={"timeField": "t", "metaField": "meta"})
        self.db.m.insert_one({"t": datetime(2024, 1, 1), "meta": 1, "v": 1})
        self.assertEqual(self.db.command("collMod", "m", timeseries={"granularity": "minutes"})["ok"], 1.0)
        ts = self.options("m")["timeseries"]
        self.assertEqual(ts["granularity"], "minutes")
        self.assertEqual(ts["bucketMaxSpanSeconds"], 86400)
        self.db.command("collMod", "m", timeseries={"granularity": "hours"})
        self.assertEqual(self.options("m")["timeseries"]["granularity"], "hours")
        for finer in ("minutes", "seconds"):
            with self.subTest(granularity=finer):
                with self.assertRaises(OperationFailure) as cm:
                    self.db.command("collMod", "m", timeseries={"granularity": finer})
                self.assertEqual(cm.exception.code, 72)
                self.assertEqual(cm.exception.details["codeName"], "InvalidOptions")
        self.assertEqual(self.options("m")["timeseries"]["granularity"], "hours")
        # The data is still there.
        self.assertEqual(self.db.m.count_documents({}), 1)

    def test_expire_after_seconds(self):
        self.db.create_collection("m", timeseries={"timeField": "t"})
        self.assertNotIn("expireAfterSeconds", self.options("m"))
        self.db.command("collMod", "m", expireAfterSeconds=3600)
        self.assertEqual(self.options("m")["expireAfterSeconds"], 3600)
        self.db.command("collMod", "m", expireAfterSeconds=Int64(7200))
        self.assertEqual(self.options("m")["expireAfterSeconds"], 7200)
        self.db.command("collMod", "m", expireAfterSeconds="off")
        self.assertNotIn("expireAfterSeconds", self.options("m"))

    def test_coll_mod_missing_collection(self):
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("collMod", "nope", expireAfterSeconds=10)
        self.assertEqual(cm.exception.code, 26)

    def test_coll_mod_unsupported_option(self):
        self.db.create_collection("m", timeseries={"timeField": "t"})
        with self.assertRaises(OperationFailure) as cm:
            self.db.command("collMod", "m", validator={"a": 1})
        self.assertEqual(cm.exception.code, 72)


if __name__ == "__main__":
    unittest.main()
