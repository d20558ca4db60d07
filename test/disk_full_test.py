#!/usr/bin/python3
"""A full file system and a capacity-bounded store under `objectcache serve`.

1. The store on a 48 MiB tmpfs that this test mounts: PUTs of 1 MiB objects until the file
   system is full. The first PUT that cannot fit fails with a clear S3 error (507
   InsufficientStorage) and leaves nothing behind; every object acknowledged before is read back
   bit-exact; a streamed upload cut off by the full disk stores nothing; after deletes, writes
   work again; a restart on the full file system opens the store and serves it.
2. A store with --capacity 16MiB on an ordinary directory keeps taking writes by evicting the
   least recently used objects: every PUT succeeds, the store stays under its bound, recent
   objects are all there and bit-exact, evicted ones are 404 (never partial).

Needs root to mount the tmpfs (unmounted at the end).

  disk_full_test.py --objectcache PATH
"""
import hashlib
import http.client
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402


def data_for(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // 32 + 1))[:size]


class Server:
    def __init__(self, binary, store, *extra):
        self.root = tempfile.mkdtemp()
        port_file = os.path.join(self.root, "port")
        self.log = os.path.join(self.root, "serve.log")
        self.proc = subprocess.Popen(
            [binary, "serve", "--anonymous", "--listen", "127.0.0.1:0", "--store", store,
             "--port-file", port_file, "--log-level", "warn", *extra],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        for _ in range(400):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                break
            assert self.proc.poll() is None, open(self.log).read()
            time.sleep(0.025)
        self.port = int(open(port_file).read())

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        m = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
        return float(m.group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        assert self.proc.returncode == 0, open(self.log).read()


def full_file_system(binary, mount):
    store = os.path.join(mount, "store")
    srv = Server(binary, store)
    acked = []
    try:
        assert srv.request("PUT", "/full")[0] == 200
        failure = None
        for i in range(200):
            name = f"obj{i:03d}"
            status, reply = srv.request("PUT", f"/full/{name}", data_for(name, 1 << 20))
            if status != 200:
                failure = (name, status, reply)
                break
            acked.append(name)
        assert failure, "the 48 MiB file system never filled"
        name, status, reply = failure
        print(f"file system full after {len(acked)} MiB: PUT {name} -> {status} "
              f"{re.search(rb'<Code>([^<]*)', reply).group(1).decode()}")
        assert status == 507 and b"<Code>InsufficientStorage</Code>" in reply, (status, reply)
        assert srv.request("GET", f"/full/{name}")[0] == 404  # nothing half-stored
        # A streamed (chunked) upload that runs into the full disk stores nothing either.
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.putrequest("PUT", "/full/streamed")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for _ in range(8):
                piece = b"s" * (1 << 20)
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
            streamed_status = conn.getresponse().status
        except OSError:
            streamed_status = "closed"
        conn.close()
        assert streamed_status != 200, streamed_status
        assert srv.request("GET", "/full/streamed")[0] == 404
        # Reads keep working, every byte.
        for n in acked:
            status, body = srv.request("GET", f"/full/{n}")
            assert status == 200 and body == data_for(n, 1 << 20), n
        # A restart on the full file system opens the store and serves it.
        srv.stop()
        srv = Server(binary, store)
        for n in acked[::5]:
            status, body = srv.request("GET", f"/full/{n}")
            assert status == 200 and body == data_for(n, 1 << 20), n
        # Room again after deletes.
        for n in acked[:4]:
            assert srv.request("DELETE", f"/full/{n}")[0] == 204
        status, reply = srv.request("PUT", "/full/after", data_for("after", 1 << 20))
        assert status == 200, reply
        assert srv.request("GET", "/full/after")[1] == data_for("after", 1 << 20)
    finally:
        srv.stop()


def capacity_bound(binary, root):
    srv = Server(binary, os.path.join(root, "bounded"), "--capacity", "16MiB")
    try:
        assert srv.request("PUT", "/bounded")[0] == 200
        names = [f"obj{i:03d}" for i in range(40)]
        for n in names:
            status, reply = srv.request("PUT", f"/bounded/{n}", data_for(n, 1 << 20))
            assert status == 200, (n, status, reply)
            assert srv.metric("objectcache_store_bytes") <= 16 << 20
        evictions = srv.metric("objectcache_store_evictions_total")
        assert evictions >= 24, evictions
        present = 0
        for n in names:
            status, body = srv.request("GET", f"/bounded/{n}")
            if status == 200:
                assert body == data_for(n, 1 << 20), n
                present += 1
            else:
                assert status == 404, (n, status)
        for n in names[-10:]:  # the most recent are kept
            assert srv.request("GET", f"/bounded/{n}")[0] == 200, n
        print(f"capacity 16 MiB: 40 MiB written, {int(evictions)} evicted, {present} present, "
              f"all bit-exact")
    finally:
        srv.stop()


def main():
    p = argument_parser()
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as root:
        mount = os.path.join(root, "small-fs")
        os.makedirs(mount)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mount],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"cannot mount a tmpfs (needs root): {r.stderr}"
        try:
            full_file_system(args.objectcache, mount)
        finally:
            subprocess.run(["umount", mount], check=True)
        capacity_bound(args.objectcache, root)
    print("ok")


if __name__ == "__main__":
    main()
