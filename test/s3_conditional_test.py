#!/usr/bin/python3
"""Conditional writes and deletes (docs/s3-api.md, "Conditional writes and deletes"): PutObject
and CompleteMultipartUpload with If-None-Match: * and If-Match, DeleteObject with If-Match,
x-amz-if-match-size and x-amz-if-match-last-modified-time, DeleteObjects with ETag, Size and
LastModifiedTime per object. Debian's boto3 1.26 and awscli 2.9 predate these headers, so they
are sent as requests signed by botocore's own signer.

  s3_conditional_test.py --objectcache PATH [unittest args]
"""
import base64
import hashlib
import os
import socket
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from s3_subresources_test import code_of, raw  # noqa: E402


class ConditionalTest(base.ServerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="cond")

    def put(self, key, body):
        """Stores `body` under `key` unconditionally; its quoted ETag."""
        return self.s3.put_object(Bucket="cond", Key=key, Body=body)["ETag"]

    def get(self, key):
        return self.s3.get_object(Bucket="cond", Key=key)["Body"].read()

    def exists(self, key):
        return any(o["Key"] == key
                   for o in self.s3.list_objects_v2(Bucket="cond", Prefix=key).get("Contents", []))


class ConditionalWriteTest(ConditionalTest):
    def test_if_none_match_star_creates_only(self):
        status, _ = raw(self.server, "PUT", "/cond/once", b"first", {"If-None-Match": "*"})
        self.assertEqual(status, 200)
        status, body = raw(self.server, "PUT", "/cond/once", b"second", {"If-None-Match": "*"})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        self.assertEqual(self.get("once"), b"first")

    def test_racing_create_only_writes_have_one_winner(self):
        for round_ in range(5):
            key = f"race{round_}"
            bodies = [f"writer {i}".encode() for i in range(8)]
            with ThreadPoolExecutor(len(bodies)) as ex:
                results = list(ex.map(lambda b: raw(self.server, "PUT", f"/cond/{key}", b,
                                                    {"If-None-Match": "*"}), bodies))
            statuses = [st for st, _ in results]
            self.assertEqual(statuses.count(200), 1, statuses)
            self.assertEqual(statuses.count(412), len(bodies) - 1, statuses)
            self.assertEqual(self.get(key), bodies[statuses.index(200)])

    def test_if_match_replaces_only_the_version_it_names(self):
        etag = self.put("m", b"v1")
        status, body = raw(self.server, "PUT", "/cond/m", b"v2", {"If-Match": '"0123"'})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        self.assertEqual(self.get("m"), b"v1")
        status, _ = raw(self.server, "PUT", "/cond/m", b"v2", {"If-Match": etag})
        self.assertEqual(status, 200)
        self.assertEqual(self.get("m"), b"v2")
        # The ETag read before is now another version's.
        status, body = raw(self.server, "PUT", "/cond/m", b"v3", {"If-Match": etag})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        self.assertEqual(self.get("m"), b"v2")
        # Unquoted and * (any current version) match too.
        status, _ = raw(self.server, "PUT", "/cond/m", b"v3",
                        {"If-Match": hashlib.md5(b"v2").hexdigest()})
        self.assertEqual(status, 200)
        status, _ = raw(self.server, "PUT", "/cond/m", b"v4", {"If-Match": "*"})
        self.assertEqual(status, 200)
        self.assertEqual(self.get("m"), b"v4")

    def test_if_match_on_a_missing_object_is_404_and_creates_nothing(self):
        for condition in ('"0123"', "*"):
            status, body = raw(self.server, "PUT", "/cond/absent", b"x", {"If-Match": condition})
            self.assertEqual((status, code_of(body)), (404, "NoSuchKey"), condition)
        self.assertFalse(self.exists("absent"))

    def test_a_write_that_loses_the_race_after_its_check_is_409(self):
        # The check runs before the body is read; another writer replaces the object between
        # the two (after the server's 100 Continue, so the order is certain). The commit then
        # finds another version and must not overwrite it.
        etag = self.put("raced", b"v1")
        body = b"the loser's bytes"
        req = base.signed_request(self.server.endpoint, "PUT", "/cond/raced", body,
                                  headers={"If-Match": etag, "Expect": "100-continue"})
        head = f"PUT /cond/raced HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\n"
        head += f"Content-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in req.headers.items()) + "\r\n"
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as sock:
            sock.sendall(head.encode())
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(4096)
                self.assertTrue(chunk, "the server closed before 100 Continue")
                got += chunk
            self.assertTrue(got.startswith(b"HTTP/1.1 100"), got)
            self.put("raced", b"the winner's bytes")
            sock.sendall(body)
            reply = b""
            while b"</Error>" not in reply:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 409"), reply)
        self.assertEqual(code_of(reply), "ConditionalRequestConflict")
        self.assertEqual(self.get("raced"), b"the winner's bytes")

    def test_racing_if_match_writes_have_one_winner(self):
        for round_ in range(3):
            key = f"cas{round_}"
            etag = self.put(key, b"v0")
            bodies = [f"writer {i}".encode() * 50000 for i in range(6)]
            with ThreadPoolExecutor(len(bodies)) as ex:
                results = list(ex.map(lambda b: raw(self.server, "PUT", f"/cond/{key}", b,
                                                    {"If-Match": etag}), bodies))
            statuses = [st for st, _ in results]
            # One replaces v0; each other one either saw the winner's version at its check (412)
            # or lost at the commit (409). None overwrote the winner.
            self.assertEqual(statuses.count(200), 1, statuses)
            self.assertEqual(statuses.count(412) + statuses.count(409), len(bodies) - 1, statuses)
            self.assertEqual(self.get(key), bodies[statuses.index(200)])

    def complete(self, key, upload, etag, headers):
        body = (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag>"
                f"</Part></CompleteMultipartUpload>").encode()
        return raw(self.server, "POST", f"/cond/{key}?uploadId={upload}", body, headers)

    def upload_one_part(self, key, data):
        upload = self.s3.create_multipart_upload(Bucket="cond", Key=key)["UploadId"]
        etag = self.s3.upload_part(Bucket="cond", Key=key, UploadId=upload, PartNumber=1,
                                   Body=data)["ETag"]
        return upload, etag

    def test_complete_multipart_create_only(self):
        self.put("exists", b"old")
        upload, etag = self.upload_one_part("exists", b"new")
        status, reply = self.complete("exists", upload, etag, {"If-None-Match": "*"})
        self.assertEqual((status, code_of(reply)), (412, "PreconditionFailed"))
        self.assertEqual(self.get("exists"), b"old")

    def test_complete_multipart_if_match_and_its_retry(self):
        old = self.put("mpu", b"old")
        upload, etag = self.upload_one_part("mpu", b"new")
        status, reply = self.complete("mpu", upload, etag, {"If-Match": '"0123"'})
        self.assertEqual((status, code_of(reply)), (412, "PreconditionFailed"))
        self.assertEqual(self.get("mpu"), b"old")
        status, first = self.complete("mpu", upload, etag, {"If-Match": old})
        self.assertEqual(status, 200, first)
        self.assertEqual(self.get("mpu"), b"new")
        # An SDK retrying after a lost answer sends the same request: the same result, though
        # the version its If-Match names is gone.
        status, again = self.complete("mpu", upload, etag, {"If-Match": old})
        self.assertEqual((status, again), (200, first))

    def test_copy_conditions_on_the_source_and_the_destination(self):
        s3 = self.s3
        src = self.put("copy-src", b"source")
        s3.copy_object(Bucket="cond", Key="copy-a", CopySource="cond/copy-src",
                       CopySourceIfMatch=src)
        for kw in ({"CopySourceIfMatch": '"0123"'}, {"CopySourceIfNoneMatch": src}):
            with self.assertRaises(ClientError) as e:
                s3.copy_object(Bucket="cond", Key="copy-b", CopySource="cond/copy-src", **kw)
            self.assertEqual(e.exception.response["Error"]["Code"], "PreconditionFailed", kw)
        self.assertFalse(self.exists("copy-b"))
        # The destination's If-None-Match / If-Match, as on PutObject (raw: boto3 1.26 has none).
        copy = {"x-amz-copy-source": "/cond/copy-src"}
        status, body = raw(self.server, "PUT", "/cond/copy-a", b"", {**copy, "If-None-Match": "*"})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        status, body = raw(self.server, "PUT", "/cond/copy-a", b"", {**copy, "If-Match": '"0123"'})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        status, _ = raw(self.server, "PUT", "/cond/copy-c", b"", {**copy, "If-None-Match": "*"})
        self.assertEqual(status, 200)
        self.assertEqual(self.get("copy-c"), b"source")

    def test_unsupported_or_contradictory_conditions_are_refused_not_ignored(self):
        self.put("kept", b"kept")
        for headers, want in (({"If-None-Match": '"0123"'}, (501, "NotImplemented")),
                              ({"If-Match": "*", "If-None-Match": "*"}, (400, "InvalidRequest"))):
            status, body = raw(self.server, "PUT", "/cond/kept", b"replaced", headers)
            self.assertEqual((status, code_of(body)), want, headers)
        self.assertEqual(self.get("kept"), b"kept")


class ConditionalDeleteTest(ConditionalTest):
    def head(self, key):
        return self.s3.head_object(Bucket="cond", Key=key)

    def test_delete_if_match(self):
        etag = self.put("d", b"bytes")
        status, body = raw(self.server, "DELETE", "/cond/d", headers={"If-Match": '"0123"'})
        self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"))
        self.assertTrue(self.exists("d"))
        status, _ = raw(self.server, "DELETE", "/cond/d", headers={"If-Match": etag})
        self.assertEqual(status, 204)
        self.assertFalse(self.exists("d"))
        # If-Match on a missing object: 404, as S3 answers it (it did not delete anything).
        for condition in (etag, "*"):
            status, body = raw(self.server, "DELETE", "/cond/d", headers={"If-Match": condition})
            self.assertEqual((status, code_of(body)), (404, "NoSuchKey"))

    def test_delete_if_size_and_last_modified(self):
        self.put("s", b"12345")
        modified = self.head("s")["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
        for headers in ({"x-amz-if-match-size": "4"},
                        {"x-amz-if-match-size": "5",
                         "x-amz-if-match-last-modified-time": "Mon, 01 Jan 2024 00:00:00 GMT"}):
            status, body = raw(self.server, "DELETE", "/cond/s", headers=headers)
            self.assertEqual((status, code_of(body)), (412, "PreconditionFailed"), headers)
            self.assertTrue(self.exists("s"))
        for bad in ({"x-amz-if-match-size": "-1"}, {"x-amz-if-match-size": "18446744073709551616"},
                    {"x-amz-if-match-last-modified-time": "yesterday"}):
            status, body = raw(self.server, "DELETE", "/cond/s", headers=bad)
            self.assertEqual((status, code_of(body)), (400, "InvalidArgument"), bad)
            self.assertTrue(self.exists("s"))
        status, _ = raw(self.server, "DELETE", "/cond/s",
                        headers={"x-amz-if-match-size": "5",
                                 "x-amz-if-match-last-modified-time": modified})
        self.assertEqual(status, 204)
        self.assertFalse(self.exists("s"))
        # Without If-Match, an object already gone is deleted: 204.
        status, _ = raw(self.server, "DELETE", "/cond/s", headers={"x-amz-if-match-size": "5"})
        self.assertEqual(status, 204)

    def test_delete_objects_with_conditions_per_object(self):
        etags = {k: self.put(f"many/{k}", k.encode() * 3) for k in ("a", "b", "c", "d", "e")}
        modified = self.s3.list_objects_v2(Bucket="cond", Prefix="many/c")["Contents"][0]
        iso = modified["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.000Z")
        body = ("<Delete>"
                f"<Object><Key>many/a</Key><ETag>{etags['a']}</ETag></Object>"
                "<Object><Key>many/b</Key><ETag>\"0123\"</ETag></Object>"
                f"<Object><Key>many/c</Key><LastModifiedTime>{iso}</LastModifiedTime>"
                "<Size>3</Size></Object>"
                "<Object><Key>many/d</Key><Size>4</Size></Object>"
                "<Object><Key>many/missing</Key><ETag>*</ETag></Object>"
                "<Object><Key>many/e</Key><Size>x</Size></Object>"
                "</Delete>").encode()
        status, reply = raw(self.server, "POST", "/cond?delete", body,
                            {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()})
        self.assertEqual(status, 200, reply)
        text = reply.decode()
        for key in ("many/a", "many/c"):
            self.assertIn(f"<Deleted><Key>{key}</Key></Deleted>", text)
        for key, code in (("many/b", "PreconditionFailed"), ("many/d", "PreconditionFailed"),
                          ("many/missing", "NoSuchKey"), ("many/e", "InvalidArgument")):
            self.assertIn(f"<Error><Key>{key}</Key><Code>{code}</Code>", text)
        left = [o["Key"] for o in self.s3.list_objects_v2(Bucket="cond",
                                                          Prefix="many/")["Contents"]]
        self.assertEqual(left, ["many/b", "many/d", "many/e"])


if __name__ == "__main__":
    base.main()
