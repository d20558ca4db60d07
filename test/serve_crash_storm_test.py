#!/usr/bin/python3
"""Crash storm: `objectcache serve` killed with SIGKILL at random moments while clients write
and read, restarted each time, at least 50 cycles.

Checks: every acknowledged write (200) is readable and bit-exact after every restart; a read
never returns a partial or mixed object (every body it returns is one whole version that some
writer sent); nothing is lost or corrupted across restarts. The store holds 20,000 objects
before the storm, so every restart rebuilds a non-trivial index; restart times (spawn to
listening) are reported.

  serve_crash_storm_test.py --objectcache PATH [--cycles N] [--seed S]
"""
import hashlib
import http.client
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402

BUCKET = "storm"
PREFILL = 20000


def body_for(name, version, size):
    """A self-describing object: header (name hash, version, size), then derived bytes."""
    head = struct.pack("<16sII", hashlib.md5(name.encode()).digest(), version, size)
    seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
    n = max(0, size - len(head))
    stream = (seed * (n // 32 + 1))[:n]
    return head + stream


def parse_version(name, body):
    """The version a body is, or None when it is not one whole version of `name`."""
    if len(body) < 24:
        return None
    digest, version, size = struct.unpack("<16sII", body[:24])
    if digest != hashlib.md5(name.encode()).digest() or size != len(body):
        return None
    return version if body == body_for(name, version, size) else None


class Server:
    def __init__(self, binary, root):
        self.binary, self.root = binary, root
        self.proc = None
        self.port = 0

    def start(self):
        port_file = os.path.join(self.root, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        log = open(os.path.join(self.root, "serve.log"), "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--anonymous", "--listen", "127.0.0.1:0", "--store",
             os.path.join(self.root, "store"), "--port-file", port_file, "--log-level", "error"],
            stdout=log, stderr=log)
        for _ in range(2000):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                break
            if self.proc.poll() is not None:
                raise RuntimeError("server exited at start; see " + log.name)
            time.sleep(0.005)
        self.port = int(open(port_file).read())
        return time.monotonic() - t0

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


def request(port, method, path, body=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def prefill(port):
    """PREFILL small objects in batch stores of 4096 (docs/wire-format.md)."""
    for start in range(0, PREFILL, 4096):
        out = bytearray()
        for i in range(start, min(PREFILL, start + 4096)):
            name = f"prefill/{i:06d}".encode()
            data = body_for(name.decode(), 0, 64)
            out += struct.pack("<II", 0x5042434F, len(name)) + name + struct.pack("<Q", len(data))
            out += data
        out += struct.pack("<I", 0x4542434F)
        status, reply = request(port, "POST", f"/{BUCKET}?batch-store", bytes(out), timeout=60)
        assert status == 200, reply[:300]


class Storm:
    """Writers and readers against one server life; they stop at the first connection error."""

    def __init__(self, port, rng, acked, lock, cycle):
        self.port, self.rng, self.acked, self.lock, self.cycle = port, rng, acked, lock, cycle
        self.bad = []
        self.reads = 0

    def writer(self, wid):
        n = 0
        while True:
            n += 1
            overwrite = self.rng.random() < 0.3
            # Overwrites go to names of this writer's own, so its versions of one name are
            # sent one after another and rise over time.
            name = f"hot/{wid}/{self.rng.randrange(3)}" if overwrite else f"w{wid}/c{self.cycle}/{n}"
            version = self.cycle * 100000 + wid * 10000 + n
            size = self.rng.choice([100, 5000, 70000, 1 << 20, 3 << 20])
            try:
                status, reply = request(self.port, "PUT", f"/{BUCKET}/{name}",
                                        body_for(name, version, size))
            except OSError:
                return
            if status != 200:
                if status < 500:
                    self.bad.append(f"PUT {name}: {status} {reply[:200]!r}")
                return
            with self.lock:
                # The newest acknowledged version of a name is the one it must have.
                self.acked[name] = max(self.acked.get(name, -1), version)

    def reader(self):
        while True:
            with self.lock:
                if not self.acked:
                    names = []
                else:
                    names = self.rng.sample(sorted(self.acked), min(4, len(self.acked)))
            for name in names:
                try:
                    status, body = request(self.port, "GET", f"/{BUCKET}/{name}")
                except OSError:
                    return
                if status >= 500:
                    return
                self.reads += 1
                if status != 200 or parse_version(name, body) is None:
                    self.bad.append(f"GET {name}: {status}, {len(body)} bytes, not one whole "
                                    f"version")
            if not names:
                time.sleep(0.01)


def verify_all(port, acked):
    """Every acknowledged name holds its newest acknowledged version or a later whole one."""
    bad = []
    for name, version in acked.items():
        status, body = request(port, "GET", f"/{BUCKET}/{name}", timeout=30)
        got = parse_version(name, body) if status == 200 else None
        if got is None or got < version:
            bad.append(f"{name}: acked v{version}, read status {status} v{got}")
    return bad


def main():
    p = argument_parser()
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--seed", type=int, default=int(time.time()))
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}")
    acked, lock = {}, threading.Lock()
    restart_s, reads, writes_before = [], 0, 0
    with tempfile.TemporaryDirectory() as root:
        server = Server(args.objectcache, root)
        server.start()
        assert request(server.port, "PUT", f"/{BUCKET}")[0] == 200
        prefill(server.port)
        for i in range(0, PREFILL, 97):
            acked[f"prefill/{i:06d}"] = 0
        try:
            for cycle in range(args.cycles):
                storm = Storm(server.port, random.Random(rng.random()), acked, lock, cycle)
                threads = [threading.Thread(target=storm.writer, args=(w,)) for w in range(3)]
                threads += [threading.Thread(target=storm.reader) for _ in range(2)]
                for t in threads:
                    t.start()
                time.sleep(rng.uniform(0.05, 0.6))
                server.kill()
                for t in threads:
                    t.join(60)
                assert not storm.bad, storm.bad[:5]
                reads += storm.reads
                restart_s.append(server.start())
                # What the last life acknowledged (and a sample of the rest) is all there.
                with lock:
                    fresh = {k: v for k, v in acked.items() if f"/c{cycle}/" in k or
                             k.startswith("hot/")}
                    sample = dict(rng.sample(sorted(acked.items()), min(50, len(acked))))
                bad = verify_all(server.port, {**sample, **fresh})
                assert not bad, (cycle, bad[:5])
            bad = verify_all(server.port, acked)
            assert not bad, bad[:5]
        finally:
            server.stop()
    objects = PREFILL + sum(1 for k in acked if not k.startswith("prefill/"))
    print(f"{args.cycles} SIGKILL cycles; {len(acked)} acknowledged names checked bit-exact "
          f"after every restart (sampled) and at the end (all); {reads} reads during the storm "
          f"were all whole versions")
    print(f"restart to listening with {PREFILL}+ objects in the store: median "
          f"{statistics.median(restart_s) * 1e3:.0f} ms, max {max(restart_s) * 1e3:.0f} ms "
          f"(about {objects} objects at the end)")
    print("ok")


if __name__ == "__main__":
    main()
