#!/usr/bin/python3
"""`objectcache nvme-kv` from the shell: serve a local store through shared memory, then store,
retrieve (whole and a byte range), exist, list, delete and identify through it; chunks the S3
gateway stored under a bucket are the controller's keys with --prefix BUCKET/; bad keys, a
missing controller and a taken name are refused with a message and a nonzero exit; SIGTERM
stops the controller and removes its segment. Then `bench nvme-kv` on a small run: it exits 0
(every value read is checked) and its JSON has the promised metrics."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402
from support import s3_server  # noqa: E402

BIN = s3_server.OC = objectcache_binary()


def run(*args, stdin=None, check=True):
    r = subprocess.run([BIN, *args], input=stdin, capture_output=True, timeout=60)
    if check:
        assert r.returncode == 0, (args, r.returncode, r.stderr.decode())
    return r


def start_controller(store, shm, *extra):
    p = subprocess.Popen([BIN, "nvme-kv", "serve", "--store", store, "--shm", shm, "--workers", "2",
                          "--data-size", "64MiB", "--max-value", "4MiB", *extra],
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert "serving" in line, line
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=30)[1]
    assert p.returncode == 0, out
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        store = "file://" + os.path.join(tmp, "store")
        shm = "objectcache-cli-test-%d" % os.getpid()
        p = start_controller(store, shm)
        try:
            # A second controller under the same name is refused.
            taken = subprocess.run([BIN, "nvme-kv", "serve", "--store", "mem://", "--shm", shm],
                                   capture_output=True, text=True, timeout=30)
            assert taken.returncode != 0 and "exists" in taken.stderr, taken.stderr
            # A controller that could hold no value, or whose data region /dev/shm cannot
            # hold (its hosts would die of SIGBUS at the first write past the free space), is
            # refused before it serves, and leaves no segment.
            free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
            bad = [(["--max-value", "0"], "must be above 0")]
            if free < (1 << 40) - (1 << 30):
                bad.append((["--data-size", str((free >> 20) + 1024) + "MiB"], "bytes free"))
            for extra, why in bad:
                r = subprocess.run([BIN, "nvme-kv", "serve", "--store", "mem://", "--shm",
                                    shm + "-bad", *extra], capture_output=True, text=True,
                                   timeout=30)
                assert r.returncode != 0 and why in r.stderr, (extra, r.stderr)
                assert not os.path.exists("/dev/shm/" + shm + "-bad"), extra
            key = "00112233445566778899aabbccddeeff"
            value = os.urandom(300000)
            path = os.path.join(tmp, "value.bin")
            open(path, "wb").write(value)
            run("nvme-kv", "store", "--shm", shm, key, path)
            assert run("nvme-kv", "retrieve", "--shm", shm, key).stdout == value
            part = run("nvme-kv", "retrieve", "--shm", shm, key.upper(), "--offset", "65536",
                       "--length", "4096").stdout
            assert part == value[65536:65536 + 4096]
            tail = run("nvme-kv", "retrieve", "--shm", shm, key, "--offset", "299000",
                       "--length", "4096").stdout
            assert tail == value[299000:], len(tail)
            run("nvme-kv", "store", "--shm", shm, "0a", "-", stdin=b"short")
            ex = run("nvme-kv", "exist", "--shm", shm, key, "0a", "0b", check=False)
            assert ex.returncode == 3, ex
            assert ex.stdout.decode().split("\n")[:3] == ["present " + key, "present 0a", "absent 0b"]
            listed = run("nvme-kv", "list", "--shm", shm).stdout.decode().split()
            assert listed == [key, "0a"], listed
            assert run("nvme-kv", "list", "--shm", shm, "--from", "01").stdout.decode().split() == ["0a"]
            # Create-only on an existing key.
            dup = run("nvme-kv", "store", "--shm", shm, "0a", "-", "--create-only", stdin=b"x",
                      check=False)
            assert dup.returncode != 0 and "Key Exists" in dup.stderr.decode(), dup.stderr
            run("nvme-kv", "delete", "--shm", shm, "0a", "0b")
            gone = run("nvme-kv", "retrieve", "--shm", shm, "0a", check=False)
            assert gone.returncode != 0 and "Key Does Not Exist" in gone.stderr.decode(), gone.stderr
            ident = run("nvme-kv", "identify", "--shm", shm).stdout.decode()
            assert "max key length: 16" in ident and "max value length: 4194304" in ident, ident
            for bad in ["zz", "0", "0" * 34, "abc"]:
                r = run("nvme-kv", "exist", "--shm", shm, bad, check=False)
                assert r.returncode != 0 and "hex digits" in r.stderr.decode(), (bad, r.stderr)
        finally:
            said = stop(p)
        assert "stopped after" in said, said
        assert not os.path.exists("/dev/shm/" + shm)
        r = run("nvme-kv", "exist", "--shm", shm, "00", check=False)
        assert r.returncode != 0 and "no NVMe-KV controller" in r.stderr.decode(), r.stderr

        # The gateway's objects of bucket kvbucket are the controller's keys under --prefix kvbucket/.
        gw_root = os.path.join(tmp, "gw")
        os.mkdir(gw_root)
        gw = s3_server.Server(gw_root, "--anonymous")
        try:
            url = gw.endpoint + "/kvbucket"
            urllib.request.urlopen(urllib.request.Request(url, data=b"", method="PUT")).read()
            body = os.urandom(5000)
            urllib.request.urlopen(urllib.request.Request(url + "/" + key, data=body, method="PUT")).read()
        finally:
            assert gw.stop() == 0, gw.log_text()
        p = start_controller("file://" + gw.store, shm, "--prefix", "kvbucket/")
        try:
            assert run("nvme-kv", "retrieve", "--shm", shm, key).stdout == body
        finally:
            stop(p)

        # The benchmark, small.
        out = os.path.join(tmp, "nvme.json")
        b = subprocess.run([BIN, "bench", "nvme-kv", "--objects", "4", "--seconds", "0.2",
                            "--rounds", "1", "--depths", "1", "4", "--sizes", "64KiB",
                            "--dir", os.path.join(tmp, "bench"), "--json", out],
                           capture_output=True, text=True, timeout=300)
        print(b.stdout)
        assert b.returncode == 0, b.stderr
        metrics = json.load(open(out))["metrics"]
        for m in ["file_retrieve_64k_qd1_nvme_ops_per_s", "file_retrieve_64k_qd4_s3_p99_us",
                  "file_exist_qd1_direct_p50_us", "file_retrieve_64k_qd4_nvme_vs_s3",
                  "file_exist_qd1_p50_nvme_minus_direct_us", "file_exist_qd4_doorbells_per_command"]:
            assert m in metrics, m
        assert metrics["file_retrieve_64k_qd1_nvme_ops_per_s"] > 0
    print("ok")


if __name__ == "__main__":
    main()
