"""Rates of `tsbucket serve` as pymongo sees them: insert_many of devops-cpu documents (TSBS
shape: 10 string tags as the meta document, 10 int64 fields, one measurement per host every
10 s) and a find that returns 100,000 documents to pymongo's raw BSON reader.

    cargo build --release -p tsbucket-cli
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install pymongo
    /tmp/venv/bin/python benches/serve/pymongo_rates.py [--hosts 1000] [--hours 1] [--runs 3]

Compare the insert rate with the engine's in-process rate on the same shape:
    cargo run --release --example ingest_timing -- --hours 1 --batch 10000
"""

import argparse, datetime, os, random, signal, statistics, subprocess, sys, tempfile, time

from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGIONS = ["us-east-1", "us-west-1", "us-west-2", "eu-west-1", "eu-central-1",
           "ap-southeast-1", "ap-southeast-2", "ap-northeast-1", "sa-east-1"]
FIELDS = ["usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait",
          "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"]


def devops(hosts, hours):
    rnd = random.Random(1)
    tags = []
    for h in range(hosts):
        r = rnd.choice(REGIONS)
        tags.append({"hostname": f"host_{h}", "region": r, "datacenter": f"{r}{rnd.choice('abc')}",
                     "rack": str(rnd.randrange(100)), "os": rnd.choice(["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"]),
                     "arch": rnd.choice(["x64", "x86"]), "team": rnd.choice(["SF", "NYC", "LON", "CHI"]),
                     "service": str(rnd.randrange(20)), "service_version": str(rnd.randrange(2)),
                     "service_environment": rnd.choice(["production", "staging", "test"])})
    values = [[rnd.randrange(101) for _ in FIELDS] for _ in range(hosts)]
    start = datetime.datetime(2016, 1, 1, tzinfo=datetime.timezone.utc)
    docs = []
    for step in range(int(hours * 360)):
        t = start + datetime.timedelta(seconds=10 * step)
        for h in range(hosts):
            v = values[h]
            for i in range(len(v)):
                v[i] = min(100, max(0, v[i] + rnd.randrange(-5, 6)))
            d = {"time": t, "tags": tags[h]}
            d.update(zip(FIELDS, v))
            docs.append(d)
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/tsbucket"))
    a = ap.parse_args()
    docs = devops(a.hosts, a.hours)
    print(f"{len(docs)} devops documents ({a.hosts} hosts x {a.hours} h)")
    inserts, finds = [], []
    for run in range(a.runs):
        d = tempfile.mkdtemp(prefix="tsbucket-serve-bench-")
        p = subprocess.Popen([a.bin, "serve", "--dir", d, "--port", "0"], stdout=subprocess.PIPE, text=True)
        port = int(p.stdout.readline().split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        c = MongoClient(f"mongodb://127.0.0.1:{port}")
        db = c.bench
        db.create_collection("cpu", timeseries={"timeField": "time", "metaField": "tags"})
        # Each run inserts fresh copies: pymongo adds an _id to the dicts it sends.
        batches = [[dict(x) for x in docs[i:i + a.batch]] for i in range(0, len(docs), a.batch)]
        t0 = time.perf_counter()
        for b in batches:
            db.cpu.insert_many(b)
        inserts.append(len(docs) / (time.perf_counter() - t0))
        raw = c.get_database("bench", codec_options=db.codec_options.with_options(document_class=RawBSONDocument))
        n = 0
        t0 = time.perf_counter()
        for _ in raw.cpu.find({}, limit=100_000):
            n += 1
        finds.append(n / (time.perf_counter() - t0))
        c.close()
        p.send_signal(signal.SIGINT)
        p.wait(60)
        subprocess.run(["rm", "-rf", d])
        print(f"run {run + 1}: insert_many {inserts[-1]:,.0f} docs/s, find of {n:,} raw documents {finds[-1]:,.0f} docs/s")
    print(f"median: insert_many {statistics.median(inserts):,.0f} docs/s; find {statistics.median(finds):,.0f} docs/s")


if __name__ == "__main__":
    sys.exit(main())
