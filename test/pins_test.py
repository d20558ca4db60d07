#!/usr/bin/python3
"""Pinned prefixes (docs/s3-api.md, "Pinned prefixes"): `POST /BUCKET?pin` and `objectcache pin`
against `objectcache serve --capacity` on the local store. Pinned chunks survive eviction
pressure of several times the capacity and go once their time is over; a pin of keys that are
not cached says which; malformed pins are 400.

  pins_test.py --objectcache PATH [unittest args]
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402

OBJECT = 256 * 1024


class PinsTest(base.ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = base.tempfile.TemporaryDirectory()
        cls.server = base.Server(cls.tmp.name, "--capacity", "2MiB")
        cls.s3 = base.client(cls.server.endpoint)
        cls.env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=base.ACCESS,
                       OBJECTCACHE_SECRET_KEY=base.SECRET)

    def keys(self, n, seed):
        return subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(seed * 1000 + i) for i in range(16 * n)], check=True,
                              capture_output=True).stdout.decode().split()

    def put(self, bucket, keys):
        for k in keys:
            self.s3.put_object(Bucket=bucket, Key=k, Body=k.encode() * (OBJECT // len(k)))

    def present(self, bucket, key):
        try:
            self.s3.head_object(Bucket=bucket, Key=key)
            return True
        except base.botocore.exceptions.ClientError:
            return False

    def pin(self, bucket, keys, ttl):
        path = os.path.join(self.tmp.name, "pin-keys")
        with open(path, "w") as f:
            f.write("\n".join(keys) + "\n")
        return subprocess.run([base.OC, "pin", "--endpoint", self.server.endpoint, "--bucket",
                               bucket, "--keys", path, "--ttl", str(ttl)], capture_output=True,
                              env=self.env, timeout=60)

    def test_pinned_chunks_survive_pressure_and_expire(self):
        self.s3.create_bucket(Bucket="pins")
        system_prompt = self.keys(2, 1)
        short = self.keys(1, 2)
        self.put("pins", system_prompt + short)
        p = self.pin("pins", system_prompt, 3600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"pinned 2 of 2 chunks", p.stderr)
        self.assertEqual(self.pin("pins", short, 1).returncode, 0)
        self.put("pins", self.keys(24, 3))  # 6 MiB through a 2 MiB cache
        for k in system_prompt + short:
            self.assertTrue(self.present("pins", k), k)
        time.sleep(2.5)  # the short pin is over
        self.put("pins", self.keys(12, 4))
        self.assertFalse(self.present("pins", short[0]))
        for k in system_prompt:
            self.assertTrue(self.present("pins", k), k)
            body = self.s3.get_object(Bucket="pins", Key=k)["Body"].read()
            self.assertEqual(body, k.encode() * (OBJECT // len(k)))

    def test_missing_keys_are_named_and_bad_pins_refused(self):
        self.s3.create_bucket(Bucket="pins-missing")
        cached, absent = self.keys(1, 5), self.keys(1, 6)
        self.put("pins-missing", cached)
        p = self.pin("pins-missing", cached + absent, 60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"pinned 1 of 2 chunks", p.stderr)
        self.assertIn(absent[0].encode(), p.stderr)
        self.assertNotIn(cached[0].encode(), p.stderr.split(b"not cached")[1])
        body = json.dumps({"keys": cached + absent, "ttl_seconds": 60}).encode()
        status, _, reply = base.send(base.signed_request(self.server.endpoint, "POST",
                                                         "/pins-missing?pin", body))
        self.assertEqual(status, 200, reply)
        reply = json.loads(reply)
        self.assertEqual((reply["pinned"], reply["missing"]), (1, absent))
        self.assertGreater(reply["until"], time.time() + 50)
        for bad in ({"keys": cached}, {"keys": cached, "ttl_seconds": 0},
                    {"keys": cached, "ttl_seconds": -5}, {"keys": cached, "ttl_seconds": "60"},
                    {"keys": cached, "ttl_seconds": 366 * 24 * 3600},
                    {"keys": cached, "ttl_seconds": 2 ** 64 - 1}, {"keys": "k", "ttl_seconds": 1},
                    {"keys": [""], "ttl_seconds": 1}):
            status, _, reply = base.send(base.signed_request(
                self.server.endpoint, "POST", "/pins-missing?pin", json.dumps(bad).encode()))
            self.assertEqual(status, 400, (bad, reply))
        status, _, _ = base.send(base.signed_request(self.server.endpoint, "POST",
                                                     "/no-such-bucket?pin", body))
        self.assertEqual(status, 404)


if __name__ == "__main__":
    base.main()
