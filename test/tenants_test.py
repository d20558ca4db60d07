#!/usr/bin/python3
"""Tenants (docs/tenants.md): `objectcache serve --credentials FILE` with three tenants over one
local store. Isolation (the same prompt's chunk keys stored by two tenants are two objects;
neither lists, reads or creates the other's buckets; an unknown key gets 403); a refusing quota
under concurrent writers (403 QuotaExceeded, never passed); an evicting quota (the tenant's own
oldest objects go, usage stays under it, an upload's parts too); per-tenant metrics; SIGHUP
rotating keys, adding a tenant and keeping the old file's tenants when the new file is broken;
`--capacity` bounding every tenant's files together.

  tenants_test.py --objectcache PATH [unittest args]
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402

QUOTA = 1024 * 1024
CREDENTIALS = f"""
[tenants.alpha]
quota = "1MiB"
over_quota = "reject"
[tenants.alpha.keys]
AKALPHA = "alpha-secret-0123456789"

[tenants.beta.keys]
AKBETA = "beta-secret-0123456789"

[tenants.gamma]
quota = "1MiB"
over_quota = "evict"
keys = {{ AKGAMMA = "gamma-secret-0123456789" }}
"""


def error_code(call):
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


class TenantsServer(unittest.TestCase):
    """A test class with one `objectcache serve` of its own over the three tenants of
    CREDENTIALS (cls.server, cls.creds, cls.metrics_port and a client each: cls.alpha, cls.beta,
    cls.gamma); subclasses give the server's other flags in EXTRA_FLAGS."""

    EXTRA_FLAGS = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.creds = os.path.join(cls.tmp.name, "credentials.toml")
        with open(cls.creds, "w") as f:
            f.write(CREDENTIALS)
        cls.server = base.Server(cls.tmp.name, "--credentials", cls.creds,
                                 "--metrics-listen", "127.0.0.1:0", *cls.EXTRA_FLAGS)
        cls.server.wait_for_log("/metrics")
        cls.metrics_port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics",
                                         cls.server.log_text()).group(1))
        cls.alpha = base.client(cls.server.endpoint, "AKALPHA", "alpha-secret-0123456789")
        cls.beta = base.client(cls.server.endpoint, "AKBETA", "beta-secret-0123456789")
        cls.gamma = base.client(cls.server.endpoint, "AKGAMMA", "gamma-secret-0123456789")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.tmp.cleanup()


class TenantsTest(TenantsServer):
    def metrics(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def test_tenant_names_are_only_on_the_metrics_port(self):
        # The metrics port is the operator's (loopback, say): it names the tenants. The S3 port
        # answers no unsigned /metrics when there is one, and a server without one leaves the
        # tenants out of its unsigned /metrics.
        self.assertIn('tenant="alpha"', self.metrics())
        with self.assertRaises(urllib.error.HTTPError):
            urllib.request.urlopen(self.server.endpoint + "/metrics", timeout=10)
        with tempfile.TemporaryDirectory() as d:
            creds = os.path.join(d, "credentials.toml")
            with open(creds, "w") as f:
                f.write(CREDENTIALS)
            server = base.Server(d, "--credentials", creds)
            try:
                with urllib.request.urlopen(server.endpoint + "/metrics", timeout=10) as r:
                    text = r.read().decode()
                self.assertIn("objectcache_requests_total", text)
                for name in ("alpha", "beta", "gamma", "tenant="):
                    self.assertFalse(name in text, f"{name} in the S3 port's /metrics")
            finally:
                self.assertEqual(server.stop(), 0)

    def metric(self, name, tenant):
        m = re.search(rf'^{name}{{tenant="{tenant}"}} (\d+)$', self.metrics(), re.M)
        return int(m.group(1)) if m else None

    def test_same_keys_two_tenants_two_objects(self):
        keys = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(11 * i) for i in range(48)], check=True,
                              capture_output=True).stdout.decode().split()
        self.alpha.create_bucket(Bucket="alpha-kv")
        self.beta.create_bucket(Bucket="beta-kv")
        for k in keys:
            self.alpha.put_object(Bucket="alpha-kv", Key=k, Body=b"alpha:" + k.encode())
            self.beta.put_object(Bucket="beta-kv", Key=k, Body=b"beta:" + k.encode())
        for k in keys:
            got = self.alpha.get_object(Bucket="alpha-kv", Key=k)["Body"].read()
            self.assertEqual(got, b"alpha:" + k.encode())
            got = self.beta.get_object(Bucket="beta-kv", Key=k)["Body"].read()
            self.assertEqual(got, b"beta:" + k.encode())
        # Each lists only its own buckets.
        names = lambda c: sorted(b["Name"] for b in c.list_buckets()["Buckets"])  # noqa: E731
        self.assertIn("alpha-kv", names(self.alpha))
        self.assertNotIn("beta-kv", names(self.alpha))
        self.assertNotIn("alpha-kv", names(self.beta))
        # The other's bucket: 403 for every use, 409 to create; its objects untouched.
        self.assertEqual(error_code(lambda: self.alpha.get_object(Bucket="beta-kv", Key=keys[0])),
                         "AccessDenied")
        self.assertEqual(error_code(lambda: self.alpha.list_objects_v2(Bucket="beta-kv")),
                         "AccessDenied")
        self.assertEqual(error_code(lambda: self.alpha.put_object(Bucket="beta-kv", Key=keys[0],
                                                                  Body=b"x")), "AccessDenied")
        self.assertEqual(error_code(lambda: self.alpha.create_bucket(Bucket="beta-kv")),
                         "BucketAlreadyExists")
        # The layerwise lookup sees only the tenant's own chunks.
        self.assertEqual(self.beta.get_object(Bucket="beta-kv", Key=keys[0])["Body"].read(),
                         b"beta:" + keys[0].encode())
        # On disk, two namespaces.
        root = os.path.join(self.tmp.name, "store", "tenants")
        self.assertTrue(os.path.isdir(os.path.join(root, "alpha")))
        self.assertTrue(os.path.isdir(os.path.join(root, "beta")))
        # A key no tenant has.
        stranger = base.client(self.server.endpoint, "AKNOBODY", "whatever-secret-123")
        self.assertEqual(error_code(stranger.list_buckets), "InvalidAccessKeyId")
        # A tenant's key with another tenant's secret.
        forged = base.client(self.server.endpoint, "AKALPHA", "beta-secret-0123456789")
        self.assertEqual(error_code(forged.list_buckets), "SignatureDoesNotMatch")
        self.assertGreater(self.metric("objectcache_tenant_requests_total", "beta"), 0)

    def test_refusing_quota_under_concurrent_writers(self):
        self.alpha.create_bucket(Bucket="alpha-quota")
        body = os.urandom(100 * 1024)
        outcomes = []

        def writer(w):
            client = base.client(self.server.endpoint, "AKALPHA", "alpha-secret-0123456789")
            for i in range(6):
                code = error_code(lambda: client.put_object(Bucket="alpha-quota",
                                                            Key=f"w{w}-{i}", Body=body))
                outcomes.append(code)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = outcomes.count(None)
        self.assertEqual(set(outcomes) - {None}, {"QuotaExceeded"})
        self.assertGreater(stored, 0)
        self.assertLess(stored, 24)
        used = self.metric("objectcache_tenant_bytes", "alpha")
        self.assertLessEqual(used, QUOTA)
        self.assertEqual(self.metric("objectcache_tenant_quota_bytes", "alpha"), QUOTA)
        self.assertEqual(self.metric("objectcache_tenant_quota_rejections_total", "alpha"),
                         24 - stored)
        listed = self.alpha.list_objects_v2(Bucket="alpha-quota").get("KeyCount", 0)
        self.assertEqual(listed, stored)
        # Deleting makes room again.
        first = self.alpha.list_objects_v2(Bucket="alpha-quota")["Contents"][0]["Key"]
        self.alpha.delete_object(Bucket="alpha-quota", Key=first)
        self.alpha.put_object(Bucket="alpha-quota", Key="after-delete", Body=body)

    def test_evicting_quota_drops_the_tenants_own_oldest(self):
        self.gamma.create_bucket(Bucket="gamma-lru")
        for i in range(30):  # 3 MiB into a 1 MiB quota
            self.gamma.put_object(Bucket="gamma-lru", Key=f"o{i:02d}", Body=bytes([i]) * 100000)
        self.assertLessEqual(self.metric("objectcache_tenant_bytes", "gamma"), QUOTA)
        self.assertGreater(self.metric("objectcache_tenant_evictions_total", "gamma"), 0)
        self.assertEqual(self.gamma.get_object(Bucket="gamma-lru", Key="o29")["Body"].read(),
                         bytes([29]) * 100000)
        self.assertEqual(error_code(lambda: self.gamma.get_object(Bucket="gamma-lru", Key="o00")),
                         "NoSuchKey")

    def test_sighup_rotates_keys_and_adds_tenants(self):
        self.beta.create_bucket(Bucket="beta-rotate")
        self.beta.put_object(Bucket="beta-rotate", Key="k", Body=b"kept")
        rotated = CREDENTIALS.replace('AKBETA = "beta-secret-0123456789"',
                                      'AKBETA2 = "beta-new-secret-0123"')
        rotated += '\n[tenants.delta.keys]\nAKDELTA = "delta-secret-0123456789"\n'
        with open(self.creds + ".next", "w") as f:
            f.write(rotated)
        os.replace(self.creds + ".next", self.creds)
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("4 tenant(s) from")
        old = base.client(self.server.endpoint, "AKBETA", "beta-secret-0123456789")
        self.assertEqual(error_code(old.list_buckets), "InvalidAccessKeyId")
        new = base.client(self.server.endpoint, "AKBETA2", "beta-new-secret-0123")
        self.assertEqual(new.get_object(Bucket="beta-rotate", Key="k")["Body"].read(), b"kept")
        delta = base.client(self.server.endpoint, "AKDELTA", "delta-secret-0123456789")
        self.assertEqual(delta.list_buckets()["Buckets"], [])
        delta.create_bucket(Bucket="delta-kept")
        # A broken file: the tenants in force stay.
        with open(self.creds, "w") as f:
            f.write("[tenants.broken\n")
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("keeping the tenants in force")
        self.assertEqual(new.get_object(Bucket="beta-rotate", Key="k")["Body"].read(), b"kept")
        with open(self.creds, "w") as f:
            f.write(CREDENTIALS)
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("3 tenant(s) from", count=2)
        self.assertEqual(self.beta.get_object(Bucket="beta-rotate", Key="k")["Body"].read(),
                         b"kept")
        self.assertEqual(error_code(delta.list_buckets), "InvalidAccessKeyId")
        # Added back, a tenant finds its store as it left it.
        with open(self.creds, "w") as f:
            f.write(rotated.replace('AKBETA2 = "beta-new-secret-0123"',
                                    'AKBETA = "beta-secret-0123456789"'))
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("4 tenant(s) from", count=2)
        self.assertEqual([b["Name"] for b in delta.list_buckets()["Buckets"]], ["delta-kept"])
        with open(self.creds, "w") as f:
            f.write(CREDENTIALS)
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("3 tenant(s) from", count=3)


def files_bytes(root):
    """The 4 KiB blocks the files under `root` fill, in bytes: what a capacity counts (their
    extended attributes, at most a block more each on ext4, are outside it; docs/tenants.md)."""
    total = 0
    for d, _, names in os.walk(root):
        total += sum(-(-os.stat(os.path.join(d, n)).st_size // 4096) * 4096 for n in names)
    return total


class TenantsShareTheCapacityTest(TenantsServer):
    """Regression: --capacity was applied to each tenant's store, so two tenants without quotas
    held twice the disk it allowed; and an evicting tenant's multipart parts were outside its
    quota."""

    CAPACITY = 4 * 1024 * 1024
    EXTRA_FLAGS = ("--capacity", "4MiB")

    def test_a_multipart_upload_stays_within_an_evicting_quota(self):
        self.gamma.create_bucket(Bucket="gamma-parts")
        upload = self.gamma.create_multipart_upload(Bucket="gamma-parts", Key="big")["UploadId"]
        part = b"p" * 300000
        codes = []
        for n in range(1, 9):  # 2.4 MB of parts into a 1 MiB quota
            codes.append(error_code(lambda: self.gamma.upload_part(
                Bucket="gamma-parts", Key="big", UploadId=upload, PartNumber=n, Body=part)))
        self.assertEqual(codes[:3], [None] * 3)
        self.assertEqual(set(codes[3:]), {"InsufficientStorage"})
        gamma_root = os.path.join(self.server.store, "tenants", "gamma")
        self.assertLessEqual(files_bytes(os.path.join(gamma_root, "objects")), QUOTA)
        parts = self.gamma.list_parts(Bucket="gamma-parts", Key="big", UploadId=upload)["Parts"]
        self.assertEqual([p["PartNumber"] for p in parts], [1, 2, 3])
        # Aborted, the upload gives its room back.
        self.gamma.abort_multipart_upload(Bucket="gamma-parts", Key="big", UploadId=upload)
        upload = self.gamma.create_multipart_upload(Bucket="gamma-parts", Key="big")["UploadId"]
        self.gamma.upload_part(Bucket="gamma-parts", Key="big", UploadId=upload, PartNumber=1,
                               Body=part)
        self.gamma.abort_multipart_upload(Bucket="gamma-parts", Key="big", UploadId=upload)

    def test_two_tenants_stay_within_the_servers_capacity(self):
        # alpha (a refusing 1 MiB quota) and beta (no quota) write 1 MiB and 6 MB: together they
        # keep within the server's 4 MiB; beta's writes past it evict beta's own oldest.
        self.alpha.create_bucket(Bucket="alpha-cap")
        self.beta.create_bucket(Bucket="beta-cap")
        body = lambda i: bytes([i]) * 100000  # noqa: E731
        for i in range(9):
            self.alpha.put_object(Bucket="alpha-cap", Key=f"a{i:02d}", Body=body(i))
        for i in range(60):
            self.beta.put_object(Bucket="beta-cap", Key=f"b{i:02d}", Body=body(i))
        objects = [os.path.join(self.server.store, "tenants", t, "objects")
                   for t in ("alpha", "beta", "gamma")]
        self.assertLessEqual(sum(files_bytes(o) for o in objects), self.CAPACITY)
        for i in range(9):  # alpha's objects were not evicted for beta's
            self.assertEqual(self.alpha.get_object(Bucket="alpha-cap", Key=f"a{i:02d}")["Body"]
                             .read(), body(i))
        self.assertEqual(self.beta.get_object(Bucket="beta-cap", Key="b59")["Body"].read(),
                         body(59))
        self.assertEqual(error_code(lambda: self.beta.get_object(Bucket="beta-cap", Key="b00")),
                         "NoSuchKey")
        # Full of beta's objects, with none of its own to evict, alpha is refused (507), not
        # given beta's room.
        for i in range(9):
            self.alpha.delete_object(Bucket="alpha-cap", Key=f"a{i:02d}")
        for i in range(60, 75):
            self.beta.put_object(Bucket="beta-cap", Key=f"b{i:02d}", Body=body(i))
        self.assertEqual(error_code(lambda: self.alpha.put_object(
            Bucket="alpha-cap", Key="late", Body=body(1))), "InsufficientStorage")
        self.assertLessEqual(sum(files_bytes(o) for o in objects), self.CAPACITY)


class TenantFlagsTest(unittest.TestCase):
    def test_refuses_credentials_with_a_single_key_or_a_bad_file(self):
        with tempfile.TemporaryDirectory() as d:
            creds = os.path.join(d, "c.toml")
            with open(creds, "w") as f:
                f.write('[tenants.a]\nquota = "many"\n')
            for extra in (["--anonymous"], []):
                p = subprocess.run([base.OC, "serve", "--listen", "127.0.0.1:0", "--store",
                                    os.path.join(d, "s"), "--credentials", creds, *extra],
                                   capture_output=True, timeout=30)
                self.assertNotEqual(p.returncode, 0)
            self.assertIn(b"c.toml:2", p.stderr)


if __name__ == "__main__":
    base.main()
