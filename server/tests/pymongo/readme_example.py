# Start the server first:  tsbucket serve --dir data    (listens on localhost:27017)
import os
from datetime import datetime, timedelta

from pymongo import MongoClient

client = MongoClient(os.environ.get("MONGODB_URI", "mongodb://localhost:27017"))
db = client.example
db.drop_collection("weather")
weather = db.create_collection(
    "weather", timeseries={"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"}
)
start = datetime(2021, 5, 18)
weather.insert_many(
    {"timestamp": start + timedelta(hours=4 * i), "metadata": {"sensorId": 5578 + i % 2}, "temp": 10 + i}
    for i in range(12)
)
for doc in weather.find({"metadata.sensorId": 5578, "timestamp": {"$gte": start}}).sort("timestamp").limit(3):
    print(doc["timestamp"], doc["temp"])
pipeline = [{"$group": {"_id": "$metadata.sensorId", "avg": {"$avg": "$temp"}}}, {"$sort": {"_id": 1}}]
for row in weather.aggregate(pipeline):
    print(f"sensor {row['_id']}: average {row['avg']:.1f}")
