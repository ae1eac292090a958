"""The weather documents of MongoDB's time-series tutorial ("Create and Query a Time Series
Collection"), plus a second sensor so that filters on the meta field select something."""

from datetime import datetime, timedelta


def tutorial_documents():
    temps = [12, 11, 11, 12, 16, 15, 13, 12, 11, 12, 17, 12]
    start = datetime(2021, 5, 18)
    return [
        {
            "metadata": {"sensorId": 5578, "type": "temperature"},
            "timestamp": start + timedelta(hours=4 * i),
            "temp": t,
        }
        for i, t in enumerate(temps)
    ]


def second_sensor_documents():
    temps = [20, 21, 22, 23, 24, 25]
    start = datetime(2021, 5, 18, 2)
    return [
        {
            "metadata": {"sensorId": 5579, "type": "temperature"},
            "timestamp": start + timedelta(hours=8 * i),
            "temp": t,
        }
        for i, t in enumerate(temps)
    ]
