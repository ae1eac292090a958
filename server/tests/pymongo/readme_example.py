# The README's example (test_readme_example.py checks that the README shows this code and runs it).
import os, datetime
from pymongo import MongoClient

db = MongoClient(os.environ.get("MONGODB_URI", "mongodb://localhost:27017")).example
db.drop_collection("weather")
weather = db.create_collection(
    "weather", timeseries={"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"})
start = datetime.datetime(2021, 5, 18)
weather.insert_many({"timestamp": start + datetime.timedelta(hours=4 * i),
                     "metadata": {"sensorId": 5578 + i % 2}, "temp": 10 + i} for i in range(12))
for doc in weather.find({"metadata.sensorId": 5578}).sort("timestamp").limit(3):
    print(doc["timestamp"], doc["temp"])
for row in weather.aggregate([{"$group": {"_id": "$metadata.sensorId", "avg": {"$avg": "$temp"}}},
                              {"$sort": {"_id": 1}}]):
    print(f"sensor {row['_id']}: average {row['avg']:.1f}")
