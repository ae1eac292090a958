// mongosh against `tsbucket serve`: the shell's own connection handshake and helpers, then the
// time-series tutorial. Any failed check throws, and mongosh exits non-zero.
function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}
db = db.getSiblingDB("shell");
db.weather.drop();
db.createCollection("weather", {timeseries: {timeField: "timestamp", metaField: "metadata", granularity: "hours"}});
const r = db.weather.insertMany([
  {metadata: {sensorId: 5578, type: "temperature"}, timestamp: ISODate("2021-05-18T00:00:00Z"), temp: 12},
  {metadata: {sensorId: 5578, type: "temperature"}, timestamp: ISODate("2021-05-18T04:00:00Z"), temp: 11},
  {metadata: {sensorId: 5579, type: "temperature"}, timestamp: ISODate("2021-05-18T08:00:00Z"), temp: 9},
]);
check(Object.keys(r.insertedIds).length === 3, "three inserted ids");
const one = db.weather.findOne({"metadata.sensorId": 5579}, {_id: 0});
check(one.temp === 9 && one.timestamp.toISOString() === "2021-05-18T08:00:00.000Z", "findOne: " + EJSON.stringify(one));
check(db.weather.countDocuments({}) === 3, "countDocuments");
const avg = db.weather.aggregate([{$group: {_id: "$metadata.sensorId", avg: {$avg: "$temp"}}}, {$sort: {_id: 1}}]).toArray();
check(avg.length === 2 && avg[0]._id === 5578 && avg[0].avg === 11.5, "aggregate: " + EJSON.stringify(avg));
check(db.getCollectionNames().includes("weather"), "getCollectionNames");
const info = db.getCollectionInfos({name: "weather"})[0];
check(info.type === "timeseries" && info.options.timeseries.metaField === "metadata", "getCollectionInfos");
check(db.weather.stats().timeseries.bucketCount === 2, "stats");
check(db.weather.find().sort({timestamp: -1}).limit(1).next().temp === 9, "find sort limit");
let refused = null;
try { db.weather.insertOne({metadata: {sensorId: 1}, temp: 1}); } catch (e) { refused = e; }
check(refused !== null && refused.code === 2, "an insert without the time field is refused with code 2");
check(db.adminCommand({ping: 1}).ok === 1, "ping");
check(db.weather.drop(), "drop");
print("mongosh smoke script: all checks passed");
