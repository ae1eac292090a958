"""MongoDB's time-series tutorial, end to end, through pymongo."""

import unittest
from datetime import datetime

from harness import ServerTestCase
from weather_data import second_sensor_documents, tutorial_documents


class TutorialTest(ServerTestCase):
    def test_weather_tutorial(self):
        db = self.client.test
        weather = db.create_collection(
            "weather",
            timeseries={"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"},
        )
        self.assertIn("weather", db.list_collection_names())
        docs = tutorial_documents()
        result = weather.insert_many(docs)
        self.assertEqual(len(result.inserted_ids), 12)
        weather.insert_many(second_sensor_documents())

        # findOne on the time field, as the tutorial does.
        one = weather.find_one({"timestamp": datetime(2021, 5, 18)})
        self.assertIsNotNone(one)
        self.assertEqual(one["metadata"], {"sensorId": 5578, "type": "temperature"})
        self.assertEqual(one["temp"], 12)
        self.assertEqual(one["_id"], result.inserted_ids[0])

        # Every field comes back as inserted.
        got = list(weather.find({"metadata.sensorId": 5578}).sort("timestamp", 1))
        self.assertEqual(len(got), 12)
        for inserted, read in zip(docs, got):
            self.assertEqual(read, inserted)  # insert_many added _id to each inserted doc

        # Meta filter plus a time range.
        got = list(
            weather.find(
                {
                    "metadata.sensorId": 5578,
                    "timestamp": {"$gte": datetime(2021, 5, 18, 12), "$lt": datetime(2021, 5, 19, 4)},
                },
                {"_id": 0, "temp": 1, "timestamp": 1},
            ).sort("timestamp", 1)
        )
        self.assertEqual(
            got,
            [
                {"timestamp": datetime(2021, 5, 18, 12), "temp": 12},
                {"timestamp": datetime(2021, 5, 18, 16), "temp": 16},
                {"timestamp": datetime(2021, 5, 18, 20), "temp": 15},
                {"timestamp": datetime(2021, 5, 19, 0), "temp": 13},
            ],
        )

        # The tutorial's aggregation, average temperature per day. The tutorial groups on
        # $dateToParts, which tsbucket's pipeline does not serve (README: expression operators
        # other than $dateTrunc are not supported); $dateTrunc by day gives the same groups.
        got = list(
            weather.aggregate(
                [
                    {"$match": {"metadata.sensorId": 5578}},
                    {"$group": {"_id": {"$dateTrunc": {"date": "$timestamp", "unit": "day"}}, "avgTmp": {"$avg": "$temp"}}},
                    {"$sort": {"_id": 1}},
                ]
            )
        )
        self.assertEqual(
            got,
            [
                {"_id": datetime(2021, 5, 18), "avgTmp": 77 / 6},
                {"_id": datetime(2021, 5, 19), "avgTmp": 77 / 6},
            ],
        )

        # $match / $group / $sort by sensor.
        got = list(
            weather.aggregate(
                [
                    {"$match": {"timestamp": {"$gte": datetime(2021, 5, 18), "$lt": datetime(2021, 5, 20)}}},
                    {"$group": {"_id": "$metadata.sensorId", "n": {"$sum": 1}, "maxTemp": {"$max": "$temp"}, "minTemp": {"$min": "$temp"}}},
                    {"$sort": {"_id": -1}},
                ]
            )
        )
        self.assertEqual(
            got,
            [
                {"_id": 5579, "n": 6, "maxTemp": 25, "minTemp": 20},
                {"_id": 5578, "n": 12, "maxTemp": 17, "minTemp": 11},
            ],
        )

        # Counts and distinct values.
        self.assertEqual(weather.count_documents({}), 18)
        self.assertEqual(weather.count_documents({"metadata.sensorId": 5578}), 12)
        self.assertEqual(weather.count_documents({"temp": {"$gt": 15}}), 2 + 6)
        self.assertEqual(weather.estimated_document_count(), 18)
        self.assertEqual(weather.distinct("metadata.sensorId"), [5578, 5579])
        self.assertEqual(weather.distinct("temp", {"metadata.sensorId": 5578}), [11, 12, 13, 15, 16, 17])

    def test_data_survives_restart(self):
        db = self.client.test
        db.create_collection(
            "weather",
            timeseries={"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"},
        )
        db.weather.insert_many(tutorial_documents())
        client = self.restart_server()
        weather = client.test.weather
        self.assertEqual(weather.count_documents({}), 12)
        self.assertEqual(
            [d["temp"] for d in weather.find({}, {"temp": 1}).sort("timestamp", 1)],
            [12, 11, 11, 12, 16, 15, 13, 12, 11, 12, 17, 12],
        )
        info = client.test.list_collections(filter={"name": "weather"}).next()
        self.assertEqual(info["options"]["timeseries"]["granularity"], "hours")


if __name__ == "__main__":
    unittest.main()
