#!/usr/bin/python3
"""`objectcache serve` driven by real S3 clients from Debian: awscli, s3cmd and boto3.

Starts the server on 127.0.0.1, port 0, over a fresh local store, and checks every byte that
comes back. Also: wrong credentials, tampered and expired requests, the streaming signed-chunk
upload, KV-layout buckets, the batch lookup extension, /metrics, malformed requests and a
graceful stop.

  s3_server_test.py --objectcache PATH
"""
import base64
import hashlib
import hmac
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import zlib

import boto3
import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
from support.s3_server import (ACCESS, AWS, S3CMD, SECRET, Server, ServerCase,  # noqa: E402,F401
                               client, raw_http, send, signed_request)


class S3ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="objectcache-s3-")
        cls.server = Server(cls.tmp)
        cls.s3 = client(cls.server.endpoint)
        cls.env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
                       AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                       AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_PAGER="")

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert code == 0, f"server exited with {code}"

    def setUp(self):
        self.rng = random.Random(self._testMethodName)
        self.work = tempfile.mkdtemp(dir=self.tmp)

    def aws(self, *args, check=True):
        quiet = ["--only-show-errors"] if args[:2] in (("s3", "cp"), ("s3", "sync"), ("s3", "rm")) else []
        p = subprocess.run([AWS, "--endpoint-url", self.server.endpoint, *args, *quiet],
                           capture_output=True, env=self.env, timeout=120)
        if check and p.returncode != 0:
            self.fail(f"aws {' '.join(args)}: {p.stderr.decode()}")
        return p

    def bucket(self, name=None):
        name = name or f"b-{self._testMethodName.lower().replace('_', '-')}"[:63]
        self.s3.create_bucket(Bucket=name)
        return name

    def file(self, name, data):
        path = os.path.join(self.work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    # ---- awscli ----------------------------------------------------------------------------

    def test_awscli_cp_sync_ls_rm_and_multipart(self):
        self.aws("s3", "mb", "s3://cli-bucket")
        small = self.rng.randbytes(1000)
        big = self.rng.randbytes(17 * 1024 * 1024 + 12345)  # multipart: 8 MiB parts
        self.aws("s3", "cp", self.file("small.bin", small), "s3://cli-bucket/dir/small.bin")
        self.aws("s3", "cp", self.file("big.bin", big), "s3://cli-bucket/big.bin")
        head = self.s3.head_object(Bucket="cli-bucket", Key="big.bin")
        self.assertEqual(head["ContentLength"], len(big))
        self.assertTrue(head["ETag"].strip('"').endswith("-3"), head["ETag"])
        self.aws("s3", "cp", "s3://cli-bucket/big.bin", os.path.join(self.work, "big.out"))
        with open(os.path.join(self.work, "big.out"), "rb") as f:
            self.assertEqual(f.read(), big)
        tree = {f"tree/{i}/f{j}.txt": self.rng.randbytes(self.rng.randrange(5000))
                for i in range(3) for j in range(4)}
        for name, data in tree.items():
            self.file(name, data)
        self.aws("s3", "sync", os.path.join(self.work, "tree"), "s3://cli-bucket/tree")
        out = self.aws("s3", "ls", "--recursive", "s3://cli-bucket/tree/").stdout.decode()
        self.assertEqual(len(out.strip().splitlines()), len(tree))
        self.aws("s3", "sync", "s3://cli-bucket/tree", os.path.join(self.work, "back"))
        for name, data in tree.items():
            with open(os.path.join(self.work, "back", name[len("tree/"):]), "rb") as f:
                self.assertEqual(f.read(), data, name)
        top = self.aws("s3", "ls", "s3://cli-bucket/").stdout.decode()
        self.assertIn("PRE dir/", top)
        self.assertIn("PRE tree/", top)
        self.aws("s3", "rm", "--recursive", "s3://cli-bucket/tree")
        self.assertEqual(self.aws("s3", "ls", "--recursive", "s3://cli-bucket/tree/",
                                  check=False).stdout, b"")

    def test_awscli_s3api_calls(self):
        b = self.bucket()
        data = self.rng.randbytes(300000)
        self.aws("s3api", "put-object", "--bucket", b, "--key", "k", "--body",
                 self.file("k", data), "--metadata", "owner=alice,model=llama",
                 "--content-type", "application/x-kv")
        head = json.loads(self.aws("s3api", "head-object", "--bucket", b, "--key", "k").stdout)
        self.assertEqual(head["Metadata"], {"owner": "alice", "model": "llama"})
        self.assertEqual(head["ContentType"], "application/x-kv")
        self.assertEqual(head["ETag"].strip('"'), hashlib.md5(data).hexdigest())
        self.aws("s3api", "get-object", "--bucket", b, "--key", "k", "--range", "bytes=100-199",
                 os.path.join(self.work, "part"))
        with open(os.path.join(self.work, "part"), "rb") as f:
            self.assertEqual(f.read(), data[100:200])
        self.aws("s3api", "copy-object", "--bucket", b, "--key", "k2", "--copy-source", f"{b}/k")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="k2")["Body"].read(), data)
        # Explicit multipart: create, two parts, list, complete.
        up = json.loads(self.aws("s3api", "create-multipart-upload", "--bucket", b, "--key",
                                 "mp").stdout)["UploadId"]
        p1, p2 = self.rng.randbytes(5 * 1024 * 1024), self.rng.randbytes(1234)
        e1 = json.loads(self.aws("s3api", "upload-part", "--bucket", b, "--key", "mp",
                                 "--part-number", "1", "--upload-id", up, "--body",
                                 self.file("p1", p1)).stdout)["ETag"]
        e2 = json.loads(self.aws("s3api", "upload-part", "--bucket", b, "--key", "mp",
                                 "--part-number", "2", "--upload-id", up, "--body",
                                 self.file("p2", p2)).stdout)["ETag"]
        parts = json.loads(self.aws("s3api", "list-parts", "--bucket", b, "--key", "mp",
                                    "--upload-id", up).stdout)["Parts"]
        self.assertEqual([p["Size"] for p in parts], [len(p1), len(p2)])
        layout = json.dumps({"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
        self.aws("s3api", "complete-multipart-upload", "--bucket", b, "--key", "mp", "--upload-id",
                 up, "--multipart-upload", layout)
        self.assertEqual(self.s3.get_object(Bucket=b, Key="mp")["Body"].read(), p1 + p2)
        want = hashlib.md5(hashlib.md5(p1).digest() + hashlib.md5(p2).digest()).hexdigest() + "-2"
        self.assertEqual(self.s3.head_object(Bucket=b, Key="mp")["ETag"].strip('"'), want)
        # Aborted uploads leave nothing.
        up2 = json.loads(self.aws("s3api", "create-multipart-upload", "--bucket", b, "--key",
                                  "gone").stdout)["UploadId"]
        self.aws("s3api", "abort-multipart-upload", "--bucket", b, "--key", "gone", "--upload-id", up2)
        p = self.aws("s3api", "list-parts", "--bucket", b, "--key", "gone", "--upload-id", up2,
                     check=False)
        self.assertIn(b"NoSuchUpload", p.stderr)
        out = json.loads(self.aws("s3api", "delete-objects", "--bucket", b, "--delete",
                                  '{"Objects":[{"Key":"k"},{"Key":"k2"},{"Key":"nope"}]}').stdout)
        self.assertEqual(sorted(d["Key"] for d in out["Deleted"]), ["k", "k2", "nope"])
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket=b).get("Contents", [])]
        self.assertEqual(keys, ["mp"])

    # ---- s3cmd -----------------------------------------------------------------------------

    def test_s3cmd_put_get_ls_del(self):
        cfg = self.file("s3cfg", (
            "[default]\n"
            f"access_key = {ACCESS}\nsecret_key = {SECRET}\n"
            f"host_base = 127.0.0.1:{self.server.port}\nhost_bucket = 127.0.0.1:{self.server.port}\n"
            "use_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n").encode())

        def s3cmd(*args):
            p = subprocess.run([S3CMD, "-c", cfg, *args], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr.decode() + p.stdout.decode())
            return p.stdout.decode()

        s3cmd("mb", "s3://s3cmd-bucket")
        data = self.rng.randbytes(70000)
        s3cmd("put", self.file("x.bin", data), "s3://s3cmd-bucket/x.bin")
        self.assertIn("s3://s3cmd-bucket/x.bin", s3cmd("ls", "s3://s3cmd-bucket"))
        s3cmd("get", "s3://s3cmd-bucket/x.bin", os.path.join(self.work, "x.out"))
        with open(os.path.join(self.work, "x.out"), "rb") as f:
            self.assertEqual(f.read(), data)
        big = self.rng.randbytes(16 * 1024 * 1024 + 5)  # s3cmd's multipart (15 MiB chunks)
        s3cmd("put", self.file("big.bin", big), "s3://s3cmd-bucket/big.bin")
        s3cmd("get", "s3://s3cmd-bucket/big.bin", os.path.join(self.work, "big.out"))
        with open(os.path.join(self.work, "big.out"), "rb") as f:
            self.assertEqual(f.read(), big)
        s3cmd("del", "s3://s3cmd-bucket/x.bin", "s3://s3cmd-bucket/big.bin")
        s3cmd("rb", "s3://s3cmd-bucket")
        self.assertNotIn("s3cmd-bucket", s3cmd("ls"))

    # ---- boto3 -----------------------------------------------------------------------------

    def test_boto3_presigned_urls(self):
        b = self.bucket()
        data = self.rng.randbytes(5000)
        put_url = self.s3.generate_presigned_url("put_object", Params={"Bucket": b, "Key": "p"},
                                                 ExpiresIn=300)
        req = urllib.request.Request(put_url, data=data, method="PUT")
        with urllib.request.urlopen(req) as r:
            self.assertEqual(r.status, 200)
        get_url = self.s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "p"},
                                                 ExpiresIn=300)
        with urllib.request.urlopen(get_url) as r:
            self.assertEqual(r.read(), data)
        tampered = get_url.replace("Key=p", "Key=q") if "Key=p" in get_url else get_url.replace("/p?", "/q?")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(tampered)
        self.assertEqual(e.exception.code, 403)
        short = self.s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "p"},
                                               ExpiresIn=1)
        time.sleep(2.1)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(short)
        self.assertEqual(e.exception.code, 403)
        self.assertIn(b"expired", e.exception.read())

    def test_boto3_empty_put_then_puts_on_one_connection(self):
        # Regression: botocore sends Expect: 100-continue; an empty PUT was answered without a
        # 100 Continue on a kept-alive connection, botocore kept that status line for its next
        # request on the connection and misread the next response (a stall until its read
        # timeout). Such a response now closes the connection.
        b = self.bucket()
        req = signed_request(self.server.endpoint, "PUT", f"/{b}/empty", b"",
                             headers={"Expect": "100-continue"})
        headers = dict(req.headers.items())
        headers["Host"] = self.server.endpoint[len("http://"):]
        head = f"PUT /{b}/empty HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "Content-Length: 0\r\n\r\n"
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as sock:
            sock.sendall(head.encode())
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:100])
        self.assertIn(b"Connection: close", reply)
        s3 = client(self.server.endpoint)
        for i in range(4):
            s3.put_object(Bucket=b, Key=f"k{i}", Body=b"x" * (i % 2))
        self.assertEqual(s3.get_object(Bucket=b, Key="k1")["Body"].read(), b"x")

    def test_boto3_ranges_conditionals_and_metadata(self):
        b = self.bucket()
        data = self.rng.randbytes(3 * 1024 * 1024 + 17)  # streamed in pieces
        put = self.s3.put_object(Bucket=b, Key="obj", Body=data, Metadata={"a": "1"},
                                 ContentType="text/x-test", CacheControl="max-age=5")
        etag = put["ETag"]
        self.assertEqual(etag.strip('"'), hashlib.md5(data).hexdigest())
        for first, last in [(0, 0), (5, 1000), (len(data) - 10, len(data) - 1),
                            (1 << 20, 3 << 20)]:
            got = self.s3.get_object(Bucket=b, Key="obj", Range=f"bytes={first}-{last}")
            self.assertEqual(got["Body"].read(), data[first:last + 1])
            self.assertEqual(got["ContentRange"], f"bytes {first}-{last}/{len(data)}")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="obj", Range="bytes=-7")["Body"].read(),
                         data[-7:])
        self.assertEqual(self.s3.get_object(Bucket=b, Key="obj", Range=f"bytes={len(data) - 3}-")
                         ["Body"].read(), data[-3:])
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.get_object(Bucket=b, Key="obj", Range=f"bytes={len(data)}-")
        self.assertEqual(e.exception.response["Error"]["Code"], "InvalidRange")
        whole = self.s3.get_object(Bucket=b, Key="obj")
        self.assertEqual(whole["Body"].read(), data)
        self.assertEqual(whole["Metadata"], {"a": "1"})
        self.assertEqual(whole["ContentType"], "text/x-test")
        self.assertEqual(whole["CacheControl"], "max-age=5")
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.get_object(Bucket=b, Key="obj", IfNoneMatch=etag)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 304)
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.get_object(Bucket=b, Key="obj", IfMatch='"0000"')
        self.assertEqual(e.exception.response["Error"]["Code"], "PreconditionFailed")
        self.assertEqual(self.s3.get_object(Bucket=b, Key="obj", IfMatch=etag)["ContentLength"], len(data))
        later = whole["LastModified"]
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.get_object(Bucket=b, Key="obj", IfModifiedSince=later)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 304)
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.get_object(Bucket=b, Key="missing")
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchKey")
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.put_object(Bucket="no-such-bucket", Key="k", Body=b"x")
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchBucket")

    def test_pipelined_gets_of_files_to_a_slow_reader(self):
        # GETs answered from the objects' files (header then sendfile, both straight to the
        # socket) to a client that sends many at once and reads late through a small receive
        # window: the server finds the socket full in both, waits, and every response still
        # arrives whole, in order, with its own header.
        b = self.bucket()
        bodies = {"big": self.rng.randbytes(200 * 1024), "small": self.rng.randbytes(20 * 1024)}
        for key, data in bodies.items():
            self.s3.put_object(Bucket=b, Key=key, Body=data, Metadata={"k": key})
        order = ["big", "small"] * 20
        requests = b""
        for key in order:
            req = signed_request(self.server.endpoint, "GET", f"/{b}/{key}")
            headers = dict(req.headers.items())
            headers["Host"] = self.server.endpoint[len("http://"):]
            requests += (f"GET /{b}/{key} HTTP/1.1\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect(("127.0.0.1", self.server.port))
            sock.sendall(requests)
            time.sleep(0.5)  # the server fills the socket meanwhile
            stream = sock.makefile("rb")
            for key in order:
                status = stream.readline()
                self.assertEqual(status, b"HTTP/1.1 200 OK\r\n", key)
                headers = {}
                while (line := stream.readline()) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                self.assertEqual(headers["x-amz-meta-k"], key)
                self.assertEqual(headers["etag"], f'"{hashlib.md5(bodies[key]).hexdigest()}"')
                length = int(headers["content-length"])
                self.assertEqual(stream.read(length), bodies[key], key)

    def test_boto3_list_pagination_delimiters_and_start_after(self):
        b = self.bucket()
        keys = sorted({f"p{i % 4}/{self.rng.randrange(10**6):06d}" for i in range(120)} |
                      {"top-a", "top-b", "weird key+%&<>é"})
        for k in keys:
            self.s3.put_object(Bucket=b, Key=k, Body=k.encode())
        paginator = self.s3.get_paginator("list_objects_v2")
        got = [o["Key"] for page in paginator.paginate(Bucket=b, PaginationConfig={"PageSize": 7})
               for o in page.get("Contents", [])]
        self.assertEqual(got, keys)
        v1 = [o["Key"] for page in self.s3.get_paginator("list_objects").paginate(
            Bucket=b, PaginationConfig={"PageSize": 9}) for o in page.get("Contents", [])]
        self.assertEqual(v1, keys)
        page = self.s3.list_objects_v2(Bucket=b, Delimiter="/")
        self.assertEqual([p["Prefix"] for p in page["CommonPrefixes"]], ["p0/", "p1/", "p2/", "p3/"])
        self.assertEqual([o["Key"] for o in page["Contents"]], ["top-a", "top-b", "weird key+%&<>é"])
        p1 = [o["Key"] for o in self.s3.list_objects_v2(Bucket=b, Prefix="p1/")["Contents"]]
        self.assertEqual(p1, [k for k in keys if k.startswith("p1/")])
        after = self.s3.list_objects_v2(Bucket=b, StartAfter="p3/")["Contents"]
        self.assertEqual([o["Key"] for o in after], [k for k in keys if k > "p3/"])
        small = self.s3.list_objects_v2(Bucket=b, Delimiter="/", MaxKeys=2)
        self.assertTrue(small["IsTruncated"])
        rest = self.s3.list_objects_v2(Bucket=b, Delimiter="/",
                                       ContinuationToken=small["NextContinuationToken"])
        self.assertEqual([p["Prefix"] for p in small["CommonPrefixes"] + rest["CommonPrefixes"]],
                         ["p0/", "p1/", "p2/", "p3/"])
        self.assertEqual(next(o for o in after if o["Key"] == "weird key+%&<>é")["Size"],
                         len("weird key+%&<>é".encode()))
        buckets = [x["Name"] for x in self.s3.list_buckets()["Buckets"]]
        self.assertIn(b, buckets)
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.delete_bucket(Bucket=b)
        self.assertEqual(e.exception.response["Error"]["Code"], "BucketNotEmpty")

    def test_virtual_hosted_style_addressing(self):
        b = self.bucket("vhost-bucket")
        self.s3.put_object(Bucket=b, Key="dir/v.txt", Body=b"virtual")
        host = f"{b}.localhost:{self.server.port}"
        req = AWSRequest(method="GET", url=f"http://{host}/dir/v.txt", headers={"Host": host})
        req.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
        SigV4Auth(Credentials(ACCESS, SECRET), "s3", "us-east-1").add_auth(req)
        lines = [f"GET /dir/v.txt HTTP/1.1", f"Host: {host}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
        reply = raw_http(self.server.port, ("\r\n".join(lines) + "\r\n\r\n").encode())
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:200])
        self.assertTrue(reply.endswith(b"virtual"))

    # ---- auth ------------------------------------------------------------------------------

    def test_wrong_credentials_and_tampering_change_nothing(self):
        b = self.bucket()
        self.s3.put_object(Bucket=b, Key="k", Body=b"original")
        for bad in [client(self.server.endpoint, secret="wrong-secret"),
                    client(self.server.endpoint, access="unknown-key")]:
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                bad.put_object(Bucket=b, Key="k", Body=b"overwritten")
            self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 403)
            with self.assertRaises(botocore.exceptions.ClientError):
                bad.delete_object(Bucket=b, Key="k")
        p = self.aws("s3", "cp", self.file("x", b"overwritten"), f"s3://{b}/k", check=False)
        self.assertEqual(p.returncode, 0)  # right credentials work through awscli
        self.s3.put_object(Bucket=b, Key="k", Body=b"original")
        env = dict(self.env, AWS_SECRET_ACCESS_KEY="nope")
        p = subprocess.run([AWS, "--endpoint-url", self.server.endpoint, "s3", "cp",
                            self.file("y", b"evil"), f"s3://{b}/k"], capture_output=True, env=env)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"SignatureDoesNotMatch", p.stderr)
        # Body changed after signing: the payload hash no longer matches.
        req = signed_request(self.server.endpoint, "PUT", f"/{b}/k", b"signed body")
        status, _, body = send(req, body=b"other body!")
        self.assertEqual(status, 400, body)
        self.assertIn(b"XAmzContentSHA256Mismatch", body)
        # A header changed after signing.
        req = signed_request(self.server.endpoint, "PUT", f"/{b}/k", b"x",
                             headers={"x-amz-meta-a": "1"})
        req.headers.replace_header("x-amz-meta-a", "2")
        status, _, body = send(req)
        self.assertEqual(status, 403)
        self.assertIn(b"SignatureDoesNotMatch", body)
        # Unsigned requests are refused outside anonymous mode.
        status = raw_http(self.server.port, f"GET /{b}/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        self.assertTrue(status.startswith(b"HTTP/1.1 403"), status[:100])
        self.assertEqual(self.s3.get_object(Bucket=b, Key="k")["Body"].read(), b"original")

    def test_a_checksum_is_checked_kept_and_answered(self):
        # boto3 checks a GET's body against the checksum the answer carries (ChecksumMode).
        b = self.bucket()
        data = self.rng.randbytes(300000)
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
        self.s3.put_object(Bucket=b, Key="crc", Body=data, ChecksumAlgorithm="CRC32")
        self.s3.put_object(Bucket=b, Key="sha", Body=data, ChecksumAlgorithm="SHA256")
        for key, field, value in [("crc", "ChecksumCRC32", crc), ("sha", "ChecksumSHA256", sha)]:
            got = self.s3.get_object(Bucket=b, Key=key, ChecksumMode="ENABLED")
            self.assertEqual(got[field], value)
            self.assertEqual(got["Body"].read(), data)
            self.assertEqual(self.s3.head_object(Bucket=b, Key=key, ChecksumMode="ENABLED")[field],
                             value)
            attributes = self.s3.get_object_attributes(Bucket=b, Key=key,
                                                       ObjectAttributes=["Checksum"])
            self.assertEqual(attributes["Checksum"][field], value)
        ranged = self.s3.get_object(Bucket=b, Key="crc", ChecksumMode="ENABLED", Range="bytes=0-9")
        self.assertNotIn("ChecksumCRC32", ranged)  # of the whole object only
        self.assertEqual(ranged["Body"].read(), data[:10])

    def test_streaming_signed_chunk_upload(self):
        # STREAMING-AWS4-HMAC-SHA256-PAYLOAD, and its -TRAILER form with a signed CRC-32 trailer
        # (what the AWS SDK for Java v2 sends over plain HTTP), each signed as the SDKs sign.
        b = self.bucket()
        payload = self.rng.randbytes(200000)
        crc = base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()
        t = time.gmtime()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", t)
        date = amz_date[:8]
        scope = f"{date}/us-east-1/s3/aws4_request"

        def sign(key, msg):
            return hmac.new(key, msg.encode(), hashlib.sha256).digest()

        k = sign(sign(sign(sign(("AWS4" + SECRET).encode(), date), "us-east-1"), "s3"), "aws4_request")
        host = f"127.0.0.1:{self.server.port}"
        for mode in ["STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                     "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"]:
            key = mode.lower()
            trailed = mode.endswith("TRAILER")
            headers = {"host": host, "x-amz-content-sha256": mode,
                       "x-amz-date": amz_date, "x-amz-decoded-content-length": str(len(payload)),
                       "content-encoding": "aws-chunked"}
            if trailed:
                headers["x-amz-trailer"] = "x-amz-checksum-crc32"
            names = sorted(headers)
            creq = "\n".join(["PUT", f"/{b}/{key}", ""] + [f"{n}:{headers[n]}" for n in names] +
                             ["", ";".join(names), mode])
            sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(creq.encode()).hexdigest()])
            seed = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()

            def encode(chunks, tamper=None):
                out, prev = b"", seed
                for c in chunks + [b""]:
                    s = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev,
                                   hashlib.sha256(b"").hexdigest(), hashlib.sha256(c).hexdigest()])
                    sig = hmac.new(k, s.encode(), hashlib.sha256).hexdigest()
                    body = bytes([c[0] ^ 1]) + c[1:] if tamper == "chunk" and c else c
                    out += f"{len(c):x};chunk-signature={sig}\r\n".encode() + body
                    prev = sig
                    if c or not trailed:
                        out += b"\r\n"
                if trailed:  # the trailer, then its signature over "name:value\n"
                    line = f"x-amz-checksum-crc32:{crc}\n"
                    s = "\n".join(["AWS4-HMAC-SHA256-TRAILER", amz_date, scope, prev,
                                   hashlib.sha256(line.encode()).hexdigest()])
                    sig = hmac.new(k, s.encode(), hashlib.sha256).hexdigest()
                    if tamper == "trailer":
                        sig = sig[::-1]
                    out += (line[:-1] + f"\r\nx-amz-trailer-signature:{sig}\r\n\r\n").encode()
                return out

            def put(body):
                auth = (f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, "
                        f"SignedHeaders={';'.join(names)}, Signature={seed}")
                h = dict(headers, authorization=auth)
                h["content-length"] = str(len(body))
                del h["host"]
                req = urllib.request.Request(f"http://{host}/{b}/{key}", data=body, method="PUT",
                                             headers=h)
                try:
                    with urllib.request.urlopen(req) as r:
                        return r.status, r.read()
                except urllib.error.HTTPError as e:
                    return e.code, e.read()

            chunks = [payload[i:i + 65536] for i in range(0, len(payload), 65536)]
            for tamper in ["chunk", "trailer"] if trailed else ["chunk"]:
                status, body = put(encode(chunks, tamper=tamper))
                self.assertEqual(status, 403, (mode, tamper, body))
                with self.assertRaises(botocore.exceptions.ClientError):
                    self.s3.head_object(Bucket=b, Key=key)  # nothing stored
            status, body = put(encode(chunks))
            self.assertEqual(status, 200, (mode, body))
            self.assertEqual(self.s3.get_object(Bucket=b, Key=key)["Body"].read(), payload)

    # ---- KV awareness ----------------------------------------------------------------------

    def chunk_object(self, layout, key_hex, seed):
        raw = random.Random(seed).randbytes(32 * 65536)
        store = "file://" + os.path.join(self.work, "chunkstore")
        subprocess.run([base.OC, "kv", "put-chunk", "--store", store, "--layout", layout, "--key",
                        key_hex, self.file(f"raw{seed}", raw)], check=True)
        return subprocess.run([base.OC, "kv", "get", "--store", store, key_hex], check=True,
                              capture_output=True).stdout

    def test_kv_bucket_validates_chunks_and_batch_lookup(self):
        self.assertEqual(send(signed_request(self.server.endpoint, "PUT", "/kv-llama", b"",
                                             headers={"x-objectcache-kv-layout": "llama-3.1-8b"}))[0], 200)
        keys = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(i) for i in range(16 * 4)], check=True,
                              capture_output=True).stdout.decode().split()
        objs = [self.chunk_object("llama-3.1-8b", k, i) for i, k in enumerate(keys)]
        for k, o in zip(keys[:3], objs[:3]):
            self.s3.put_object(Bucket="kv-llama", Key=k, Body=o)
        damaged = bytearray(objs[3])
        damaged[4096 + 7 * 65536 + 3] ^= 0x40
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            self.s3.put_object(Bucket="kv-llama", Key=keys[3], Body=bytes(damaged))
        self.assertEqual(e.exception.response["Error"]["Code"], "InvalidChunkObject")
        self.assertIn("layer 7", e.exception.response["Error"]["Message"])
        for bad_key, body in [("not-a-chunk-key", objs[3]), (keys[2], objs[3]), (keys[3], b"plain")]:
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                self.s3.put_object(Bucket="kv-llama", Key=bad_key, Body=body)
            self.assertEqual(e.exception.response["Error"]["Code"], "InvalidChunkObject", bad_key)
        # Layer 5 of chunk 1 is one byte range.
        got = self.s3.get_object(Bucket="kv-llama", Key=keys[1],
                                 Range=f"bytes={4096 + 5 * 65536}-{4096 + 6 * 65536 - 1}")["Body"].read()
        self.assertEqual(got, objs[1][4096 + 5 * 65536:4096 + 6 * 65536])
        body = json.dumps({"keys": keys}).encode()
        status, _, reply = send(signed_request(self.server.endpoint, "POST", "/kv-llama?lookup", body))
        self.assertEqual(status, 200, reply)
        r = json.loads(reply)
        self.assertEqual((r["count"], r["present_prefix"], r["present"]), (4, 3, 3))
        self.assertEqual(base64.b64decode(r["bitmap"]), bytes([0b0111]))
        too_many = json.dumps({"keys": ["k"] * 8193}).encode()
        status, _, reply = send(signed_request(self.server.endpoint, "POST", "/kv-llama?lookup", too_many))
        self.assertEqual(status, 400, reply)

    def test_layerwise_retrieval_streams_layers_and_stops_at_damage(self):
        import struct
        import xxhash
        status, _, body = send(signed_request(self.server.endpoint, "PUT", "/kv-lw", b"",
                                              headers={"x-objectcache-kv-layout": "llama-3.1-8b"}))
        self.assertEqual(status, 200, body)
        keys = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(7 * i) for i in range(16 * 6)], check=True,
                              capture_output=True).stdout.decode().split()
        raws = {}
        for i, k in enumerate(keys):
            if i == 4:
                continue  # a gap: the prefix stops here
            obj = self.chunk_object("llama-3.1-8b", k, 100 + i)
            raws[k] = obj
            self.s3.put_object(Bucket="kv-lw", Key=k, Body=obj)

        def fetch(first, last, layout="llama-3.1-8b", version=1):
            req = json.dumps({"version": version, "keys": keys, "layers": [first, last],
                              "layout": layout}).encode()
            return send(signed_request(self.server.endpoint, "POST", "/kv-lw?layerwise", req))

        def decode(data, want_version=1):
            """Frames as (layer, chunks, payload, status, checksum, slice checksums (v2))."""
            magic, version, _, hits, first, count, slice_bytes, nkeys, _ = struct.unpack_from(
                "<8sHHIIIQII", data, 0)
            self.assertEqual((magic, version, nkeys), (b"OCLWRSP1", want_version, len(keys)))
            pos, frames, error = 40, [], None
            while pos < len(data):
                tag = struct.unpack_from("<I", data, pos)[0]
                if tag == 0x454C434F:  # OCLE
                    _, code, n, _ = struct.unpack_from("<IIII", data, pos)
                    error = (code, data[pos + 16:pos + 16 + n].decode())
                    pos += 16 + n
                    continue
                _, layer, chunks, _, payload = struct.unpack_from("<IIIIQ", data, pos)
                pos += 24
                sums = []
                if version == 2 and payload:  # the writers' checksums, one per slice
                    sums = list(struct.unpack_from(f"<{chunks}Q", data, pos))
                    pos += 8 * chunks
                body = data[pos:pos + payload]
                pos += payload
                st, _, checksum = struct.unpack_from("<IIQ", data, pos)
                pos += 16
                frames.append((layer, chunks, body, st, checksum, sums))
            return hits, first, count, slice_bytes, frames, error

        def slices(body):
            return [body[j * 65536:(j + 1) * 65536] for j in range(len(body) // 65536)]

        for version in (1, 2):
            status, headers, data = fetch(3, 7, version=version)
            self.assertEqual(status, 200, data[:300])
            hits, first, count, slice_bytes, frames, error = decode(data, version)
            self.assertEqual((hits, first, count, slice_bytes, error), (4, 3, 4, 65536, None))
            self.assertEqual([f[0] for f in frames], [3, 4, 5, 6])  # layer-major, in order
            for layer, chunks, body, st, checksum, sums in frames:
                self.assertEqual((chunks, st), (4, 0))
                want = b"".join(raws[k][4096 + layer * 65536:4096 + (layer + 1) * 65536]
                                for k in keys[:4])
                self.assertEqual(body, want, f"layer {layer}")
                if version == 1:
                    self.assertEqual(checksum, xxhash.xxh3_64_intdigest(body))
                else:  # each slice's checksum as its writer stored it; no frame checksum
                    self.assertEqual(sums, [xxhash.xxh3_64_intdigest(x) for x in slices(body)])
                    self.assertEqual(checksum, 0)

        # The C++ client (`objectcache fetch`) gets the same bytes, layer-major.
        self.file("lw-keys", "\n".join(keys).encode())
        env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=ACCESS, OBJECTCACHE_SECRET_KEY=SECRET)
        for version in ("1", "2"):
            out = os.path.join(self.work, "fetched" + version)
            p = subprocess.run([base.OC, "fetch", "--endpoint", self.server.endpoint, "--bucket",
                                "kv-lw", "--layout", "llama-3.1-8b", "--keys",
                                os.path.join(self.work, "lw-keys"), "--layers", "3:7", "--out", out,
                                "--wire-version", version], capture_output=True, env=env)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"4 of 6 chunks", p.stderr)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), b"".join(fr[2] for fr in frames))

        status, _, data = fetch(0, 2, layout="granite-3.3-8b")
        self.assertEqual(status, 400, data)
        self.assertIn(b"layout", data)

        # A byte flipped on disk in layer 5 of chunk 1: layer 4 arrives, layer 5 is marked
        # failed (its bytes are not to be used), an error record names the chunk, nothing follows.
        path = None
        for root, _, files in os.walk(os.path.join(self.server.store, "objects")):
            for f in files:
                if f == "kv-lw%2F" + keys[1]:
                    path = os.path.join(root, f)
        with open(path, "r+b") as f:
            f.seek(4096 + 5 * 65536 + 10)
            b = f.read(1)
            f.seek(4096 + 5 * 65536 + 10)
            f.write(bytes([b[0] ^ 0xFF]))
        status, _, data = fetch(4, 8)
        self.assertEqual(status, 200)
        hits, _, _, _, frames, error = decode(data)
        self.assertEqual([(f[0], f[3]) for f in frames], [(4, 0), (5, 15)])
        self.assertEqual(error[0], 15)
        self.assertIn(keys[1], error[1])
        self.assertIn("layer 5", error[1])
        # Version 2: the server checks nothing and sends the damaged bytes with the checksum
        # their writer stored, so the reader sees the mismatch itself.
        status, _, data = fetch(4, 8, version=2)
        self.assertEqual(status, 200)
        _, _, _, _, frames, error = decode(data, 2)
        self.assertEqual(([(f[0], f[3]) for f in frames], error), ([(4, 0), (5, 0), (6, 0), (7, 0)], None))
        layer5 = slices(frames[1][2])
        self.assertNotEqual(frames[1][5][1], xxhash.xxh3_64_intdigest(layer5[1]))
        self.assertEqual(frames[1][5][0], xxhash.xxh3_64_intdigest(layer5[0]))
        for version, message in [("1", b"checksum mismatch in layer 5"),
                                 ("2", b"layer 5: chunk " + keys[1].encode() + b": slice checksum mismatch")]:
            out = os.path.join(self.work, "fetched-damaged" + version)
            p = subprocess.run([base.OC, "fetch", "--endpoint", self.server.endpoint, "--bucket",
                                "kv-lw", "--layout", "llama-3.1-8b", "--keys",
                                os.path.join(self.work, "lw-keys"), "--layers", "4:8", "--out", out,
                                "--wire-version", version], capture_output=True, env=env)
            self.assertEqual(p.returncode, 1)
            self.assertIn(message, p.stderr)
            self.assertFalse(os.path.exists(out))

    def test_batch_store_is_all_or_nothing(self):
        import struct
        self.assertEqual(send(signed_request(self.server.endpoint, "PUT", "/kv-batch", b"",
                                             headers={"x-objectcache-kv-layout": "llama-3.1-8b"}))[0], 200)
        keys = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(3 * i + 1) for i in range(16 * 3)], check=True,
                              capture_output=True).stdout.decode().split()
        objs = [self.chunk_object("llama-3.1-8b", k, 200 + i) for i, k in enumerate(keys)]

        def batch(pairs):
            out = b""
            for k, o in pairs:
                out += struct.pack("<II", 0x5042434F, len(k)) + k.encode() + struct.pack("<Q", len(o)) + o
            return out + struct.pack("<I", 0x4542434F)

        def stored():
            return [o["Key"] for o in self.s3.list_objects_v2(Bucket="kv-batch").get("Contents", [])]

        damaged = bytearray(objs[1])
        damaged[4096 + 2 * 65536] ^= 1
        status, _, body = send(signed_request(self.server.endpoint, "POST", "/kv-batch?batch-store",
                                              batch([(keys[0], objs[0]), (keys[1], bytes(damaged))])))
        self.assertEqual(status, 400, body)
        self.assertIn(b"InvalidChunkObject", body)
        self.assertEqual(stored(), [])  # not even the valid first record
        req = signed_request(self.server.endpoint, "POST", "/kv-batch?batch-store", batch(list(zip(keys, objs))))
        tampered = bytearray(req.body)
        tampered[-100] ^= 1
        status, _, body = send(req, body=bytes(tampered))
        self.assertEqual(status, 400, body)
        self.assertEqual(stored(), [])
        status, _, body = send(req)
        self.assertEqual(status, 200, body)
        reply = json.loads(body)
        self.assertEqual([r["key"] for r in reply["stored"]], keys)
        self.assertEqual(sorted(stored()), sorted(keys))
        for k, o in zip(keys, objs):
            got = self.s3.get_object(Bucket="kv-batch", Key=k)
            self.assertEqual(got["Body"].read(), o)
            self.assertEqual(got["ETag"].strip('"'), hashlib.md5(o).hexdigest())

    # ---- operations ------------------------------------------------------------------------

    def test_metrics_and_malformed_requests(self):
        with urllib.request.urlopen(self.server.endpoint + "/metrics") as r:
            text = r.read().decode()
        self.assertIn('objectcache_requests_total{op="PutObject"}', text)
        self.assertIn("objectcache_request_seconds_bucket", text)
        self.assertIn("objectcache_open_connections", text)
        for garbage in [b"\x00\x01\x02 not http\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                        b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n"]:
            reply = raw_http(self.server.port, garbage)
            self.assertTrue(reply.startswith(b"HTTP/1.1 4"), (garbage[:40], reply[:120]))
        self.assertEqual(self.s3.list_buckets()["ResponseMetadata"]["HTTPStatusCode"], 200)

    def test_limits_answer_and_the_server_keeps_serving(self):
        root = tempfile.mkdtemp(dir=self.tmp)
        srv = Server(root, "--max-body", "1MiB", "--header-timeout", "1", "--max-header-bytes",
                     "4096", "--max-connections", "8")
        try:
            s3 = client(srv.endpoint)
            s3.create_bucket(Bucket="limits")
            with self.assertRaises(botocore.exceptions.ClientError) as e:
                s3.put_object(Bucket="limits", Key="big", Body=b"x" * (1024 * 1024 + 1))
            self.assertEqual(e.exception.response["Error"]["Code"], "EntityTooLarge")
            reply = raw_http(srv.port, b"GET /limits HTTP/1.1\r\nHost: x\r\nX-Big: " +
                             b"a" * 5000 + b"\r\n\r\n")
            self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply[:100])
            self.assertIn(b"RequestHeaderSectionTooLarge", reply)
            # A client that stops half-way through its header is cut off after the timeout.
            slow = socket.create_connection(("127.0.0.1", srv.port))
            slow.sendall(b"GET /limits HTTP/1.1\r\nHost: x\r\n")
            slow.settimeout(10)
            t0 = time.time()
            self.assertEqual(slow.recv(100), b"")
            self.assertLess(time.time() - t0, 9)
            slow.close()
            # More connections than allowed: the extra ones are closed, the rest keep working.
            extra = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(12)]
            time.sleep(0.3)
            refused = 0
            for c in extra:
                c.settimeout(0.2)
                try:
                    refused += c.recv(1) == b""
                except (socket.timeout, ConnectionResetError):
                    pass
            self.assertGreaterEqual(refused, 4)
            for c in extra:
                c.close()
            time.sleep(0.3)
            s3.put_object(Bucket="limits", Key="small", Body=b"fine")
            self.assertEqual(s3.get_object(Bucket="limits", Key="small")["Body"].read(), b"fine")
            with self.assertRaises(botocore.exceptions.ClientError):
                s3.head_object(Bucket="limits", Key="big")  # nothing half-stored
        finally:
            srv.stop()

    def test_graceful_stop_finishes_in_flight_requests(self):
        root = tempfile.mkdtemp(dir=self.tmp)
        # Options from a config file too: anonymous mode and the grace period.
        conf = os.path.join(root, "serve.toml")
        with open(conf, "w") as f:
            f.write("[serve]\nanonymous = true\nshutdown-grace = 20\n")
        srv = Server(root, "--config", conf)
        try:
            self.assertIn("ANONYMOUS", srv.log_text())
            anon = boto3.client("s3", endpoint_url=srv.endpoint, region_name="us-east-1",
                                config=Config(signature_version=botocore.UNSIGNED))
            anon.create_bucket(Bucket="anon")
            # Larger than what loopback socket buffers absorb, so the server is still sending.
            data = self.rng.randbytes(48 * 1024 * 1024)
            anon.put_object(Bucket="anon", Key="big", Body=data)
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /anon/big HTTP/1.1\r\nHost: x\r\n\r\n")
            received = s.recv(65536)
            self.assertTrue(received.startswith(b"HTTP/1.1 200"))
            srv.proc.send_signal(signal.SIGTERM)
            deadline, mark = time.time() + 30, len(received)
            while time.time() < deadline:
                b = s.recv(1 << 20)
                if not b:
                    break
                received += b
                if len(received) - mark > (1 << 20):
                    mark = len(received)
                    time.sleep(0.005)  # a reader slower than the server
            s.close()
            self.assertTrue(received.endswith(data[-100000:]), "the download was cut short")
            self.assertIn(b"Connection: close", received[:1000] + b"Connection: close")
            self.assertEqual(srv.proc.wait(20), 0)
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        finally:
            srv.stop()


if __name__ == "__main__":
    base.main()
