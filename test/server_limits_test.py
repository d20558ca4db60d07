#!/usr/bin/python3
"""Regression tests of the security review's findings that need a server of their own: the idle
timeout, running out of file descriptors, the request memory budget, capacity eviction and
the server's records, multipart expiry, caps, pagination and retried completes, metrics on their
own port, unsigned x-amz-* headers refused by every handler; and an s3:// upstream that claims
a record no process could hold. Each starts `objectcache serve` on 127.0.0.1 with the options
it needs and ends it by its PID.

  server_limits_test.py --objectcache PATH [unittest args]
"""
import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
from support.canned_http import canned_server  # noqa: E402
from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402


def wait_for(condition, seconds, what):
    """Polls `condition` until it holds; fails after `seconds` (a bound, not a measurement)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


def signed_raw(endpoint, method, path, body=b"", headers=None, extra=None):
    """Raw request bytes signed by botocore, with `extra` headers added after signing."""
    req = AWSRequest(method=method, url=endpoint + path, data=body, headers=headers or {})
    req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(base.ACCESS, base.SECRET), "s3", "us-east-1").add_auth(req)
    hdrs = dict(req.headers.items())
    hdrs["Host"] = endpoint[len("http://"):]
    hdrs["Connection"] = "close"
    if body or method in ("PUT", "POST"):
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(extra or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    return head.encode() + b"\r\n" + body


def status_and_code(reply):
    m = re.match(rb"HTTP/1\.1 (\d{3})", reply)
    code = re.search(rb"<Code>([^<]+)</Code>", reply)
    return (int(m.group(1)) if m else None, code.group(1).decode() if code else None)


def store_files_containing(server, text):
    found = []
    for root, _, files in os.walk(server.store):
        found += [f for f in files if text in f]
    return found


class ServerCase(unittest.TestCase):
    def start(self, *extra, prefix=()):
        self.tmp = tempfile.TemporaryDirectory()
        if prefix:
            # Run under a wrapper (prlimit): the Server class starts OC, so point OC at a script.
            wrapper = os.path.join(self.tmp.name, "wrapped")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\nexec " + " ".join(prefix) + f" {base.OC} \"$@\"\n")
            os.chmod(wrapper, 0o755)
            saved, base.OC = base.OC, wrapper
            try:
                self.server = base.Server(self.tmp.name, *extra)
            finally:
                base.OC = saved
        else:
            self.server = base.Server(self.tmp.name, *extra)
        self.s3 = base.client(self.server.endpoint)
        return self.server

    def tearDown(self):
        if getattr(self, "server", None):
            self.assertEqual(self.server.stop(), 0, self.server.log_text()[-2000:])
        if getattr(self, "tmp", None):
            self.tmp.cleanup()


class IdleTimeoutTest(ServerCase):
    def test_silent_connections_are_closed_and_do_not_shut_clients_out(self):
        # Regression: the idle wait bypassed the stream's timer, so 20 silent connections with
        # --max-connections 20 shut out every client for good.
        server = self.start("--max-connections", "20", "--idle-timeout", "2")
        silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
        try:
            for s in silent:
                s.settimeout(15)
                self.assertEqual(s.recv(1), b"", "the server closes a silent connection")
        finally:
            for s in silent:
                s.close()
        wait_for(lambda: self.s3.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200, 10,
                 "a client to be served again")


class FileDescriptorTest(ServerCase):
    def test_running_out_of_descriptors_answers_503_and_recovers(self):
        # Regression: the accept loop spun on EMFILE and new connections hung. The local store
        # holds 256 directory descriptors; 400 leave room for about 130 connections.
        server = self.start("--workers", "1", "--idle-timeout", "3",
                            prefix=("prlimit", "--nofile=400:400"))
        self.s3.create_bucket(Bucket="fds")
        held, answers = [], []
        try:
            for _ in range(300):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=15)
                held.append(s)
            # Each connection is either served (and closed after the idle timeout) or, when the
            # server had no descriptor for it, answered 503 and closed: none is left hanging.
            for s in held:
                try:
                    answers.append(s.recv(200))
                except socket.timeout:
                    answers.append(b"hung")
        finally:
            for s in held:
                s.close()
        self.assertEqual(sum(a == b"hung" for a in answers), 0, "connections left hanging")
        refused = sum(a.startswith(b"HTTP/1.1 503") for a in answers)
        self.assertGreater(refused, 0, "no connection was answered 503")
        self.assertIn("accepting connections: Too many open files", server.log_text())
        wait_for(lambda: self.s3.head_bucket(Bucket="fds")["ResponseMetadata"]["HTTPStatusCode"]
                 == 200, 20, "the server to serve again")


class BatchStoreOpenObjectsTest(ServerCase):
    @staticmethod
    def record(key, size):
        """One batch-store record (docs/wire-format.md): its header, then `size` bytes."""
        return struct.pack("<II", 0x5042434F, len(key)) + key.encode() + \
            struct.pack("<Q", size) + b"x" * size

    @classmethod
    def batch(cls, prefix, n, size=100):
        """A batch-store body of n records of `size` bytes and the end marker."""
        return b"".join(cls.record(f"{prefix}{i}", size) for i in range(n)) + \
            struct.pack("<I", 0x4542434F)

    def store(self, prefix, n):
        reply = base.raw_http(self.server.port, signed_raw(
            self.server.endpoint, "POST", "/open?batch-store", self.batch(prefix, n)))
        return status_and_code(reply)

    def test_unfinished_batch_stores_hold_a_bounded_number_of_objects(self):
        # Regression: each record kept an open file until its request's body was complete, with
        # no bound: ten unfinished requests held 16,384 descriptors and other requests got 503.
        self.start("--max-open-batch-objects", "4")
        self.s3.create_bucket(Bucket="open")
        self.assertEqual(self.store("five", 5), (503, "SlowDown"))
        self.assertEqual(self.store("four", 4)[0], 200)
        names = [o["Key"] for o in self.s3.list_objects_v2(Bucket="open")["Contents"]]
        self.assertEqual(sorted(names), [f"four{i}" for i in range(4)])  # none of the five
        # A request that sends 3 of its 4 records and waits holds 3 of the 4. The server reads
        # the body in whole 1 MiB buffers: more than 1 MiB sent past the third record's header
        # makes sure that header is read.
        records = [self.record("held0", 100), self.record("held1", 100),
                   self.record("held2", 2 << 20), self.record("held3", 100)]
        body = b"".join(records) + struct.pack("<I", 0x4542434F)
        cut = len(records[0]) + len(records[1]) + len(self.record("held2", 0)) + (1 << 20) + 65536
        head = signed_raw(self.server.endpoint, "POST", "/open?batch-store", body)
        held = socket.create_connection(("127.0.0.1", self.server.port), timeout=90)
        try:
            held.sendall(head[:len(head) - len(body)] + body[:cut])
            # Its three records are open (their temporary files are there) before anything else
            # is asked: a store sent meanwhile could take the room of the third and have the
            # held request refused instead.
            tmp = os.path.join(self.server.store, "tmp")
            wait_for(lambda: len(os.listdir(tmp)) >= 3, 60, "the held request's three records")
            attempt = iter(range(100000))
            answers = []

            def refused():
                answers.append(self.store(f"two{next(attempt)}-", 2))
                return answers[-1] == (503, "SlowDown")
            try:
                wait_for(refused, 60, "two more objects to be refused while three are held")
            except AssertionError as e:
                raise AssertionError(f"{e} (the last answers: {answers[-3:]})") from None
            # The fourth (once the refused request has given back the one it took).
            wait_for(lambda: self.store(f"one{next(attempt)}-", 1)[0] == 200, 60, "a fourth object")
            self.assertEqual(self.s3.get_object(Bucket="open", Key="four0")["Body"].read(),
                             b"x" * 100)  # other requests go on
        finally:
            held.close()
        # The abandoned request's objects are given back and nothing of it was stored.
        wait_for(lambda: self.store("after", 3)[0] == 200, 10, "the held objects to be freed")
        names = [o["Key"] for o in self.s3.list_objects_v2(Bucket="open")["Contents"]]
        self.assertFalse([n for n in names if n.startswith("held")], names)


class MemoryBudgetTest(ServerCase):
    def test_header_only_requests_with_large_content_lengths_hold_no_memory(self):
        # Regression: small-body reads reserved Content-Length before any byte arrived: 20
        # header-only lookups held +176 MB for the io timeout.
        budget = 32 << 20
        server = self.start("--request-memory", str(budget), "--io-timeout", "20")
        self.s3.create_bucket(Bucket="mem")
        before = rss_bytes(server.proc.pid)
        held = []
        try:
            for _ in range(60):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.sendall(signed_raw(server.endpoint, "POST", "/mem?lookup", b"",
                                     extra={"Content-Length": "9000000"}))
                held.append(s)
            time.sleep(1)  # let the server read every header and start every body read
            grown = rss_bytes(server.proc.pid) - before
        finally:
            for s in held:
                s.close()
        self.assertLess(grown, budget, f"RSS grew by {grown >> 20} MiB for 60 idle lookups")

    def test_buffers_outside_their_bounds_are_refused_at_start(self):
        # A response holds two windows of the request budget: an explicit window beyond half of
        # it, or under 64 KiB, stops serve with a message (the default shrinks to fit instead).
        # So does a streaming buffer under 4 KiB or over 64 MiB, u64 max included.
        with tempfile.TemporaryDirectory() as tmp:
            for extra in (["--layerwise-window", "1KiB"],
                          ["--request-memory", "64MiB", "--layerwise-window", "33MiB"],
                          ["--io-buffer", "0"], ["--io-buffer", "4095"],
                          ["--io-buffer", "65MiB"], ["--io-buffer", str(2**64 - 1)]):
                run = subprocess.run([base.OC, "serve", "--anonymous", "--listen", "127.0.0.1:0",
                                      "--store", os.path.join(tmp, "store")] + extra,
                                     capture_output=True, text=True, timeout=30)
                self.assertNotEqual(run.returncode, 0, extra)
                self.assertIn(extra[-2], run.stderr, extra)
                self.assertNotIn("listening", run.stderr, extra)

    def test_limits_that_would_turn_every_request_away_are_refused_at_start(self):
        # Limits at which the server would turn every request away (no connection, no header, a
        # 503 SlowDown to every upload however long its client retried), and 0 workers, stop it
        # before it listens.
        with tempfile.TemporaryDirectory() as tmp:
            for extra, why in ((["--max-connections", "0"], "--max-connections"),
                               (["--max-header-bytes", "0"], "--max-header-bytes"),
                               (["--header-timeout", "0"], "--header-timeout"),
                               (["--workers", "0"], "--workers"),
                               (["--request-memory", "1"], "--request-memory 1 holds no request"),
                               (["--request-memory", "1MiB", "--io-buffer", "2MiB"],
                                "at least 2097152 bytes")):
                run = subprocess.run([base.OC, "serve", "--anonymous", "--listen", "127.0.0.1:0",
                                      "--store", os.path.join(tmp, "store")] + extra,
                                     capture_output=True, text=True, timeout=30)
                self.assertNotEqual(run.returncode, 0, extra)
                self.assertIn(why, run.stderr, extra)
                self.assertNotIn("listening", run.stderr, extra)

    def test_bodies_over_the_budget_get_slow_down(self):
        server = self.start("--request-memory", "1MiB", "--io-buffer", "1MiB")
        self.s3.create_bucket(Bucket="mem")
        # A PUT needs an io buffer of 1 MiB; a lookup's body grows past what is left.
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            body = b"x" * (2 << 20)
            req = signed_raw(server.endpoint, "PUT", "/mem/slow", body)
            s.sendall(req[:len(req) - len(body)] + body[:1000])  # holds its buffer
            time.sleep(0.5)
            reply = base.raw_http(server.port, signed_raw(server.endpoint, "PUT", "/mem/other",
                                                         b"y" * 10))
            self.assertEqual(status_and_code(reply), (503, "SlowDown"))
        finally:
            s.close()
        wait_for(lambda: status_and_code(base.raw_http(
            server.port, signed_raw(server.endpoint, "PUT", "/mem/other", b"y" * 10)))[0] == 200,
            20, "the budget to come back")


class CapacityTest(ServerCase):
    def test_eviction_never_removes_buckets_uploads_or_parts(self):
        # Regression: with 1 MiB capacity a KV bucket vanished (and could be re-created without
        # its layout), a plain bucket vanished under its objects, an upload's parts were gone.
        self.start("--capacity", "1MiB")
        s3 = self.s3
        reply = base.raw_http(self.server.port, signed_raw(
            self.server.endpoint, "PUT", "/kv-bucket",
            extra={"x-objectcache-kv-layout": "llama-3.1-8b"}))
        self.assertEqual(status_and_code(reply)[0], 403, "x-objectcache-* must be signed")
        req = signed_raw(self.server.endpoint, "PUT", "/kv-bucket",
                         headers={"x-objectcache-kv-layout": "llama-3.1-8b"})
        self.assertEqual(status_and_code(base.raw_http(self.server.port, req))[0], 200)
        s3.create_bucket(Bucket="plain")
        upload = s3.create_multipart_upload(Bucket="plain", Key="big")["UploadId"]
        part = os.urandom(300 << 10)
        etag = s3.upload_part(Bucket="plain", Key="big", UploadId=upload, PartNumber=1,
                              Body=part)["ETag"]
        for i in range(40):  # 40 x 100 KiB through a 1 MiB store
            s3.put_object(Bucket="plain", Key=f"o{i}", Body=os.urandom(100 << 10))
        time.sleep(2.5)  # past the handler's bucket cache: the records themselves are read
        s3.head_bucket(Bucket="plain")
        layout = urllib.request.urlopen(urllib.request.Request(
            self.server.endpoint + "/kv-bucket?kv-layout",
            headers=dict(base.signed_request(self.server.endpoint, "GET",
                                             "/kv-bucket?kv-layout").headers.items())))
        self.assertIn(b"llama", layout.read())
        parts = s3.list_parts(Bucket="plain", Key="big", UploadId=upload)["Parts"]
        self.assertEqual([p["PartNumber"] for p in parts], [1])
        s3.complete_multipart_upload(Bucket="plain", Key="big", UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        self.assertEqual(s3.get_object(Bucket="plain", Key="big")["Body"].read(), part)


class MultipartTest(ServerCase):
    def test_abandoned_uploads_expire_with_their_parts(self):
        server = self.start("--upload-expiry", "2")
        self.s3.create_bucket(Bucket="mpu")
        upload = self.s3.create_multipart_upload(Bucket="mpu", Key="k")["UploadId"]
        self.s3.upload_part(Bucket="mpu", Key="k", UploadId=upload, PartNumber=1, Body=b"p" * 100)
        self.assertTrue(store_files_containing(server, upload))
        # Nobody touches the upload again: the server's sweep removes it, parts and all.
        wait_for(lambda: not store_files_containing(server, upload), 20,
                 "the expired upload's files to go")
        self.assertEqual(self.s3.list_multipart_uploads(Bucket="mpu").get("Uploads", []), [])
        with self.assertRaises(ClientError) as e:
            self.s3.list_parts(Bucket="mpu", Key="k", UploadId=upload)
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchUpload")

    def test_a_bucket_holds_a_bounded_number_of_uploads_listed_in_pages(self):
        self.start("--max-uploads-per-bucket", "3")
        s3 = self.s3
        s3.create_bucket(Bucket="mpu")
        ids = [s3.create_multipart_upload(Bucket="mpu", Key=k)["UploadId"] for k in "bac"]
        with self.assertRaises(ClientError) as e:
            s3.create_multipart_upload(Bucket="mpu", Key="d")
        self.assertEqual(e.exception.response["Error"]["Code"], "InvalidRequest")
        self.assertIn("max-uploads-per-bucket", e.exception.response["Error"]["Message"])
        first = s3.list_multipart_uploads(Bucket="mpu", MaxUploads=2)
        self.assertTrue(first["IsTruncated"])
        self.assertEqual([u["Key"] for u in first["Uploads"]], ["a", "b"])
        rest = s3.list_multipart_uploads(Bucket="mpu", MaxUploads=2,
                                         KeyMarker=first["NextKeyMarker"],
                                         UploadIdMarker=first["NextUploadIdMarker"])
        self.assertFalse(rest["IsTruncated"])
        self.assertEqual([u["Key"] for u in rest["Uploads"]], ["c"])
        s3.abort_multipart_upload(Bucket="mpu", Key="b", UploadId=ids[0])
        s3.create_multipart_upload(Bucket="mpu", Key="d")

    def test_delete_bucket_removes_its_open_uploads(self):
        server = self.start()
        s3 = self.s3
        s3.create_bucket(Bucket="gone")
        upload = s3.create_multipart_upload(Bucket="gone", Key="k")["UploadId"]
        s3.upload_part(Bucket="gone", Key="k", UploadId=upload, PartNumber=1, Body=b"p")
        s3.delete_bucket(Bucket="gone")
        self.assertEqual(store_files_containing(server, upload), [])
        s3.create_bucket(Bucket="gone")
        self.assertEqual(s3.list_multipart_uploads(Bucket="gone").get("Uploads", []), [])

    def test_a_retried_complete_answers_like_the_first(self):
        # Regression: a complete whose record outlived the commit (a crash in between, or a
        # lost response) failed its retry with InvalidPart although the object existed.
        self.start()
        s3 = self.s3
        s3.create_bucket(Bucket="mpu")
        upload = s3.create_multipart_upload(Bucket="mpu", Key="k")["UploadId"]
        parts = [os.urandom(5 << 20), os.urandom(1000)]
        done = [{"PartNumber": i + 1, "ETag": s3.upload_part(
            Bucket="mpu", Key="k", UploadId=upload, PartNumber=i + 1, Body=p)["ETag"]}
            for i, p in enumerate(parts)]
        first = s3.complete_multipart_upload(Bucket="mpu", Key="k", UploadId=upload,
                                             MultipartUpload={"Parts": done})
        again = s3.complete_multipart_upload(Bucket="mpu", Key="k", UploadId=upload,
                                             MultipartUpload={"Parts": done})
        self.assertEqual(first["ETag"], again["ETag"])
        self.assertEqual(s3.get_object(Bucket="mpu", Key="k")["Body"].read(), b"".join(parts))
        # A different part list for the same id is still refused.
        with self.assertRaises(ClientError) as e:
            s3.complete_multipart_upload(Bucket="mpu", Key="k", UploadId=upload,
                                         MultipartUpload={"Parts": done[:1]})
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchUpload")


class CreateBucketRaceTest(ServerCase):
    def test_racing_creates_with_different_layouts_have_one_winner(self):
        # Regression: CreateBucket checked, then wrote: two creates could both succeed and the
        # bucket ended bound to a layout other than the one its creator was told.
        server = self.start()
        layouts = ["llama-3.1-8b", "llama-3.1-70b"] * 4
        for round_ in range(5):
            bucket = f"race{round_}"
            reqs = [signed_raw(server.endpoint, "PUT", f"/{bucket}",
                               headers={"x-objectcache-kv-layout": layout}) for layout in layouts]
            with ThreadPoolExecutor(len(reqs)) as ex:
                replies = list(ex.map(lambda r: base.raw_http(server.port, r), reqs))
            statuses = [status_and_code(r) for r in replies]
            winners = [i for i, st in enumerate(statuses) if st[0] == 200]
            self.assertEqual(len(winners), 1, statuses)
            for st in statuses:
                self.assertIn(st, [(200, None), (409, "BucketAlreadyOwnedByYou")])
            req = base.signed_request(server.endpoint, "GET", f"/{bucket}?kv-layout")
            got = urllib.request.urlopen(urllib.request.Request(
                req.url, headers=dict(req.headers.items())), timeout=10).read()
            self.assertIn(layouts[winners[0]].encode(), got)


class MetricsPortTest(ServerCase):
    def test_metrics_move_to_their_own_port(self):
        server = self.start("--metrics-listen", "127.0.0.1:0")
        port = server.metrics_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            self.assertIn(b"objectcache_", r.read())
        reply = base.raw_http(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                          b"Connection: close\r\n\r\n")
        self.assertEqual(status_and_code(reply), (403, "AccessDenied"))
        reply = base.raw_http(port, b"GET /bucket/key HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(status_and_code(reply)[0], 404)


class UnsignedHeaderTest(ServerCase):
    def test_every_handler_refuses_an_unsigned_x_amz_header(self):
        server = self.start()
        s3 = self.s3
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="k", Body=b"secret")
        upload = s3.create_multipart_upload(Bucket="bkt", Key="m")["UploadId"]
        delete = b"<Delete><Object><Key>k</Key></Object></Delete>"
        md5 = __import__("base64").b64encode(hashlib.md5(delete).digest()).decode()
        requests = [
            ("GET", "/", b"", {}),                                  # ListBuckets
            ("PUT", "/bkt2", b"", {}),                                # CreateBucket
            ("HEAD", "/bkt", b"", {}),                                # HeadBucket
            ("DELETE", "/bkt", b"", {}),                              # DeleteBucket
            ("GET", "/bkt", b"", {}),                                 # ListObjects
            ("GET", "/bkt?list-type=2", b"", {}),                     # ListObjectsV2
            ("GET", "/bkt?location", b"", {}),                        # GetBucketLocation
            ("GET", "/bkt?uploads", b"", {}),                         # ListMultipartUploads
            ("GET", "/bkt?kv-layout", b"", {}),                       # the layout extension
            ("POST", "/bkt?delete", delete, {"Content-MD5": md5}),    # DeleteObjects
            ("POST", "/bkt?lookup", b'{"keys": ["k"]}', {}),          # batch lookup
            ("POST", "/bkt?layerwise", b"{}", {}),                    # layerwise retrieval
            ("POST", "/bkt?batch-store", b"", {}),                    # batch store
            ("PUT", "/bkt/k2", b"x", {}),                             # PutObject
            ("GET", "/bkt/k", b"", {}),                               # GetObject
            ("HEAD", "/bkt/k", b"", {}),                              # HeadObject
            ("DELETE", "/bkt/k", b"", {}),                            # DeleteObject
            ("PUT", "/bkt/k3", b"", {"x-amz-copy-source": "/bkt/k"}),   # CopyObject
            ("POST", "/bkt/m?uploads", b"", {}),                      # CreateMultipartUpload
            ("PUT", f"/bkt/m?partNumber=1&uploadId={upload}", b"p", {}),  # UploadPart
            ("GET", f"/bkt/m?uploadId={upload}", b"", {}),            # ListParts
            ("POST", f"/bkt/m?uploadId={upload}", b"<x/>", {}),       # Complete
            ("DELETE", f"/bkt/m?uploadId={upload}", b"", {}),         # Abort
        ]
        for unsigned in ({"x-amz-copy-source": "/bkt/k"}, {"x-amz-meta-evil": "1"},
                         {"x-objectcache-kv-layout": "llama-3.1-8b"}):
            for method, path, body, headers in requests:
                if set(unsigned) & set(headers):
                    continue  # that header is signed in this request
                reply = base.raw_http(server.port, signed_raw(server.endpoint, method, path, body,
                                                             headers, extra=unsigned))
                status, code = status_and_code(reply)
                self.assertEqual(status, 403, f"{method} {path} with {unsigned}: {reply[:200]}")
                if method != "HEAD":
                    self.assertEqual(code, "AccessDenied", f"{method} {path}")
                    self.assertIn(b"not signed", reply)
        # Nothing was done: the object is there, the bucket too, no copy was made.
        self.assertEqual(s3.get_object(Bucket="bkt", Key="k")["Body"].read(), b"secret")
        names = [o["Key"] for o in s3.list_objects_v2(Bucket="bkt").get("Contents", [])]
        self.assertEqual(names, ["k"])



class LyingUpstreamTest(ServerCase):
    def test_a_record_size_no_process_could_hold_ends_the_request_not_the_server(self):
        # Over an s3:// store, a bucket record's size is the upstream's Content-Length: 2^61
        # threw std::bad_alloc in a blocking-pool thread, which ended the process.
        with canned_server(lambda target: b"", head={"Content-Length": str(2**61)}) as port:
            server = self.start("--store", f"s3://127.0.0.1:{port}/up")
            for _ in range(3):
                with self.assertRaises(ClientError) as e:
                    self.s3.get_object(Bucket="bkt", Key="k")
                self.assertEqual(e.exception.response["Error"]["Code"], "InsufficientStorage")
            self.assertIsNone(server.proc.poll(), "the server is still serving")
            self.assertIn("over the 4194304", server.log_text() + str(e.exception))
            self.assertEqual(self.server.stop(), 0, self.server.log_text()[-2000:])
            self.server = None

if __name__ == "__main__":
    base.main()
