"""Errors as pymongo raises them: the code and codeName MongoDB would send."""

import unittest
from datetime import datetime

from pymongo.errors import OperationFailure

from harness import ServerTestCase


class ErrorCodeTest(ServerTestCase):
    def setUp(self):
        super().setUp()
        self.db = self.client.test
        self.db.create_collection("weather", timeseries={"timeField": "timestamp", "metaField": "metadata"})

    def assertFails(self, code, code_name, fn, *args, **kwargs):
        with self.assertRaises(OperationFailure) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code, cm.exception.details)
        self.assertEqual(cm.exception.details["codeName"], code_name)
        self.assertEqual(cm.exception.details["ok"], 0.0)
        self.assertTrue(cm.exception.details["errmsg"])
        return cm.exception

    def test_unknown_command(self):
        self.assertFails(59, "CommandNotFound", self.db.command, "noSuchCommandAtAll")
        self.assertFails(59, "CommandNotFound", self.client.admin.command, {"frobnicate": 1})

    def test_transactions_are_refused(self):
        with self.client.start_session() as s:
            with self.assertRaises(OperationFailure) as cm:
                with s.start_transaction():
                    self.db.weather.insert_one({"timestamp": datetime(2024, 1, 1), "v": 1}, session=s)
            self.assertEqual(cm.exception.code, 20)
            self.assertEqual(cm.exception.details["codeName"], "IllegalOperation")
        # Nothing was written, and the server still works.
        self.assertEqual(self.db.weather.count_documents({}), 0)
        self.db.weather.insert_one({"timestamp": datetime(2024, 1, 1), "v": 1})
        self.assertEqual(self.db.weather.count_documents({}), 1)

    def test_commit_transaction_refused(self):
        self.assertFails(20, "IllegalOperation", self.client.admin.command, "commitTransaction")
        self.assertFails(20, "IllegalOperation", self.client.admin.command, "abortTransaction")

    def test_sessions_without_transactions_work(self):
        with self.client.start_session() as s:
            self.db.weather.insert_one({"timestamp": datetime(2024, 1, 1), "v": 1}, session=s)
            self.assertEqual(self.db.weather.count_documents({}, session=s), 1)
            self.assertEqual(len(list(self.db.weather.find({}, session=s))), 1)

    def test_find_on_missing_collection(self):
        self.assertEqual(list(self.db.missing.find({})), [])
        self.assertEqual(list(self.client.otherdb.missing.find({})), [])

    def test_insert_into_missing_collection(self):
        e = self.assertFails(26, "NamespaceNotFound", self.db.missing.insert_one, {"timestamp": datetime(2024, 1, 1)})
        self.assertIn("missing", e.details["errmsg"])
        self.assertFails(26, "NamespaceNotFound", self.client.otherdb.missing.insert_many, [{"timestamp": datetime(2024, 1, 1)}])
        # No collection and no database came of it.
        self.assertNotIn("missing", self.db.list_collection_names())
        self.assertNotIn("otherdb", self.client.list_database_names())

    def test_wrong_argument_types(self):
        self.assertFails(14, "TypeMismatch", self.db.command, "find", "weather", filter=5)
        self.assertFails(9, "FailedToParse", self.db.command, "aggregate", "weather", pipeline=5, cursor={})
        self.assertFails(2, "BadValue", self.db.command, "find", "weather", skip=-1)

    def test_invalid_database_name(self):
        with self.assertRaises(Exception):
            self.client["bad.name"].create_collection("x", timeseries={"timeField": "t"})

    def test_system_namespace_create_refused(self):
        self.assertFails(73, "InvalidNamespace", self.db.command, "create", "system.buckets.x", timeseries={"timeField": "t"})

    def test_not_served_commands_are_named(self):
        e = self.assertFails(
            238, "NotImplemented", self.db.command, "findAndModify", "weather", query={}, update={"$set": {"metadata": 1}}
        )
        self.assertIn("findAndModify", e.details["errmsg"])


if __name__ == "__main__":
    unittest.main()
