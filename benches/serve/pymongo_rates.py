"""Rates of `tsbucket serve` as pymongo sees them, beside the same work without pymongo's share:
insert_many of devops-cpu documents (TSBS shape: 10 string tags as the meta document, 10 int64
fields, one measurement per host every 10 s), and a find that returns 100,000 documents
(over a plain socket, also of the data just inserted, still in open buckets).

Each figure is measured three ways in one run: through pymongo as users write it (dicts, and
RawBSONDocument results); through pymongo with the encoding or decoding taken off (documents
encoded beforehand as RawBSONDocument; `find_raw_batches`); and over a plain socket with
messages built beforehand, which is the server's own rate. pymongo's encoder and decoder alone
are timed too, without any server.

    cargo build --release -p tsbucket-cli
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install pymongo
    /tmp/venv/bin/python benches/serve/pymongo_rates.py [--hosts 1000] [--hours 1] [--runs 3]

Compare the insert rate with the engine's in-process rate on the same shape:
    cargo run --release --example ingest_timing -- --hours 1 --batch 10000
"""

import argparse, datetime, os, random, signal, socket, statistics, struct, subprocess, sys, tempfile, time

import bson
from bson.codec_options import CodecOptions
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


class Wire:
    """A plain socket speaking OP_MSG: the server's side of the work, with no driver."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @staticmethod
    def message(body, sequence=None):
        sec = b"\x00" + bson.encode(body)
        if sequence:
            name, docs = sequence
            seq = name.encode() + b"\x00" + b"".join(docs)
            sec += b"\x01" + struct.pack("<i", 4 + len(seq)) + seq
        m = struct.pack("<I", 0) + sec
        return struct.pack("<iiii", 16 + len(m), 1, 0, 2013) + m

    def round_trip(self, msg):
        self.s.sendall(msg)
        ln = struct.unpack("<i", self.s.recv(4, socket.MSG_WAITALL))[0]
        body = self.s.recv(ln - 4, socket.MSG_WAITALL)
        return body


def timed(f):
    t0 = time.perf_counter()
    n = f()
    return n / (time.perf_counter() - t0)


def plain_find(w, n):
    """`find` of `n` documents in the driver's batch sizes (101, then up to 16 MiB), read as
    bytes: the cursor id is the reply's last `id` field, after the batch."""
    reply = w.round_trip(Wire.message({"find": "cpu", "limit": n, "batchSize": 101, "$db": "dicts"}))
    size = len(reply)
    while (at := reply.rfind(b"\x12id\x00")) > 0 and (cid := struct.unpack_from("<q", reply, at + 4)[0]):
        reply = w.round_trip(Wire.message({"getMore": cid, "collection": "cpu", "$db": "dicts"}))
        size += len(reply)
    assert size > n * 100, "the batches do not hold the documents"
    return n


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
    encoded = [bson.encode(d) for d in docs]
    raw_docs = [RawBSONDocument(b) for b in encoded]
    rows = {k: [] for k in ["insert dicts", "insert RawBSONDocument", "insert plain socket",
                            "encode only", "find RawBSONDocument", "find_raw_batches",
                            "find plain socket", "find plain socket, open", "decode only"]}
    for run in range(a.runs):
        d = tempfile.mkdtemp(prefix="tsbucket-serve-bench-")
        p = subprocess.Popen([a.bin, "serve", "--dir", d, "--port", "0"], stdout=subprocess.PIPE, text=True)
        port = int(p.stdout.readline().split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        c = MongoClient(f"mongodb://127.0.0.1:{port}")
        for name in ["dicts", "raw", "wire"]:
            c[name].create_collection("cpu", timeseries={"timeField": "time", "metaField": "tags"})
        # pymongo adds an _id to the dicts it sends: each run sends fresh copies.
        batches = [[dict(x) for x in docs[i:i + a.batch]] for i in range(0, len(docs), a.batch)]
        rows["insert dicts"].append(timed(lambda: sum(len(c.dicts.cpu.insert_many(b).inserted_ids) for b in batches)))

        def insert_raw():
            # pymongo reports no ids for RawBSONDocuments (the server makes them): count them.
            for i in range(0, len(docs), a.batch):
                c.raw.cpu.insert_many(raw_docs[i:i + a.batch])
            return c.raw.cpu.count_documents({})

        rows["insert RawBSONDocument"].append(timed(insert_raw))
        w = Wire(port)
        msgs = [Wire.message({"insert": "cpu", "$db": "wire"}, ("documents", encoded[i:i + a.batch]))
                for i in range(0, len(docs), a.batch)]
        rows["insert plain socket"].append(timed(lambda: sum(bson.decode(w.round_trip(m)[17:])["n"] for m in msgs)))
        rows["encode only"].append(timed(lambda: len([bson.encode(x) for x in docs])))
        # The data just inserted is still in open buckets, as the newest data always is.
        n = min(100_000, len(docs))
        rows["find plain socket, open"].append(timed(lambda: plain_find(w, n)))
        # Reads of flushed data, as most of a database is: restart the server.
        c.close()
        p.send_signal(signal.SIGINT)
        p.wait(120)
        p = subprocess.Popen([a.bin, "serve", "--dir", d, "--port", "0"], stdout=subprocess.PIPE, text=True)
        port = int(p.stdout.readline().split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        c = MongoClient(f"mongodb://127.0.0.1:{port}")
        raw = c.get_database("dicts", codec_options=CodecOptions(document_class=RawBSONDocument))
        n = min(100_000, len(docs))
        raw.cpu.find_one()
        rows["find RawBSONDocument"].append(timed(lambda: sum(1 for _ in raw.cpu.find({}, limit=n))))

        def raw_batches():
            # The batches as bytes, in the driver's default sizes (101 documents, then 16 MiB).
            size = sum(len(b) for b in c.dicts.cpu.find_raw_batches({}, limit=n))
            assert size > n * 100, "the batches do not hold the documents"
            return n

        rows["find_raw_batches"].append(timed(raw_batches))
        w = Wire(port)

        rows["find plain socket"].append(timed(lambda: plain_find(w, n)))
        batch = b"".join(encoded[:n])
        rows["decode only"].append(timed(lambda: len(bson.decode_all(batch, CodecOptions(document_class=RawBSONDocument)))))
        c.close()
        p.send_signal(signal.SIGINT)
        p.wait(120)
        subprocess.run(["rm", "-rf", d])
        print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()))
    print("medians, documents/s:")
    for k, v in rows.items():
        print(f"  {k:24} {statistics.median(v):>12,.0f}")


if __name__ == "__main__":
    sys.exit(main())
