#!/usr/bin/python3
"""S3 sub-resources as clients use them (docs/s3-api.md, "Sub-resources"): versions listings
and versioning on unversioned buckets, ACLs as a single-owner cache honours them, versionId=null,
and every sub-resource the server does not implement answered 501 rather than the base
operation. boto3 (botocore) calls where it has one, signed raw requests elsewhere.

  s3_subresources_test.py --objectcache PATH [unittest args]
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
import boto3  # noqa: E402
from botocore.auth import HmacV1Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402


def fetch(url, method="GET", data=None, headers=None):
    """(status, body) of one request; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(urllib.request.Request(
                url, data=data, method=method, headers=headers or {}), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def raw(server, method, path, body=b"", headers=None):
    """A request signed by botocore's SigV4 signer."""
    req = base.signed_request(server.endpoint, method, path, body, headers=headers)
    return fetch(req.url, method, body or None, dict(req.headers.items()))


def code_of(body):
    m = re.search(rb"<Code>([^<]+)</Code>", body)
    return m.group(1).decode() if m else None


class SubResourceTest(base.ServerCase):
    def error_code(self, fn, **kw):
        with self.assertRaises(ClientError) as e:
            fn(**kw)
        return e.exception.response["Error"]["Code"]

    def test_a_versioned_cleanup_empties_and_deletes_the_bucket(self):
        # Regression: ?versions was answered as a plain listing, the tool deleted nothing and the
        # bucket delete failed with BucketNotEmpty.
        s3 = self.s3
        s3.create_bucket(Bucket="vclean")
        for i in range(5):
            s3.put_object(Bucket="vclean", Key=f"d/{i}", Body=b"x" * i)
        resource = boto3.resource("s3", endpoint_url=self.server.endpoint,
                                  aws_access_key_id=base.ACCESS,
                                  aws_secret_access_key=base.SECRET, region_name="us-east-1")
        bucket = resource.Bucket("vclean")
        versions = list(bucket.object_versions.all())
        self.assertEqual(sorted(v.object_key for v in versions), [f"d/{i}" for i in range(5)])
        self.assertTrue(all(v.id == "null" and v.is_latest for v in versions))
        bucket.object_versions.delete()
        bucket.delete()
        self.assertEqual(self.error_code(s3.head_bucket, Bucket="vclean"), "404")

    def test_version_listings_page_like_s3(self):
        s3 = self.s3
        s3.create_bucket(Bucket="vpages")
        for k in ["a", "b", "c/1", "c/2", "d"]:
            s3.put_object(Bucket="vpages", Key=k, Body=k.encode())
        first = s3.list_object_versions(Bucket="vpages", MaxKeys=2)
        self.assertTrue(first["IsTruncated"])
        self.assertEqual([v["Key"] for v in first["Versions"]], ["a", "b"])
        self.assertEqual(first["NextVersionIdMarker"], "null")
        rest = s3.list_object_versions(Bucket="vpages", KeyMarker=first["NextKeyMarker"],
                                       VersionIdMarker="null", Delimiter="/")
        self.assertFalse(rest["IsTruncated"])
        self.assertEqual([v["Key"] for v in rest["Versions"]], ["d"])
        self.assertEqual([p["Prefix"] for p in rest["CommonPrefixes"]], ["c/"])

    def test_versioning_is_off_and_cannot_be_enabled(self):
        s3 = self.s3
        s3.create_bucket(Bucket="vconf")
        self.assertNotIn("Status", s3.get_bucket_versioning(Bucket="vconf"))
        s3.put_bucket_versioning(Bucket="vconf", VersioningConfiguration={"Status": "Suspended"})
        self.assertEqual(self.error_code(s3.put_bucket_versioning, Bucket="vconf",
                                         VersioningConfiguration={"Status": "Enabled"}),
                         "NotImplemented")

    def test_version_id_null_is_the_object_and_others_do_not_exist(self):
        s3 = self.s3
        s3.create_bucket(Bucket="vnull")
        s3.put_object(Bucket="vnull", Key="k", Body=b"data")
        self.assertEqual(s3.get_object(Bucket="vnull", Key="k", VersionId="null")["Body"].read(),
                         b"data")
        s3.head_object(Bucket="vnull", Key="k", VersionId="null")
        self.assertEqual(self.error_code(s3.get_object, Bucket="vnull", Key="k",
                                         VersionId="3HL4kqtJlcpXroDTDmJ"), "NoSuchVersion")
        out = s3.delete_objects(Bucket="vnull", Delete={"Objects": [
            {"Key": "k", "VersionId": "other"}]})
        self.assertEqual(out["Errors"][0]["Code"], "NoSuchVersion")
        self.assertEqual(s3.get_object(Bucket="vnull", Key="k")["Body"].read(), b"data")
        s3.delete_object(Bucket="vnull", Key="k", VersionId="null")
        self.assertEqual(self.error_code(s3.head_object, Bucket="vnull", Key="k"), "404")

    def test_acls_are_the_owner_with_full_control_and_only_private_is_accepted(self):
        # bucket-owner-full-control is private here too: the bucket's owner owns every object.
        s3 = self.s3
        s3.create_bucket(Bucket="acls")
        s3.put_object(Bucket="acls", Key="k", Body=b"v")
        for acl in (s3.get_bucket_acl(Bucket="acls"), s3.get_object_acl(Bucket="acls", Key="k")):
            self.assertEqual(acl["Owner"]["ID"], "objectcache")
            self.assertEqual([(g["Grantee"]["ID"], g["Permission"]) for g in acl["Grants"]],
                             [("objectcache", "FULL_CONTROL")])
        # Regression: PUT ?acl was answered as CreateBucket (BucketAlreadyOwnedByYou).
        s3.put_bucket_acl(Bucket="acls", ACL="private")
        s3.put_object_acl(Bucket="acls", Key="k", ACL="private")
        s3.put_object_acl(Bucket="acls", Key="k", ACL="bucket-owner-full-control")
        s3.put_object(Bucket="acls", Key="k2", Body=b"v", ACL="bucket-owner-full-control")
        self.assertEqual(self.error_code(s3.put_object, Bucket="acls", Key="k3", Body=b"v",
                                         ACL="public-read"), "NotImplemented")
        owner = {"ID": "objectcache"}
        s3.put_bucket_acl(Bucket="acls", AccessControlPolicy={
            "Owner": owner,
            "Grants": [{"Grantee": {"ID": "objectcache", "Type": "CanonicalUser"},
                        "Permission": "FULL_CONTROL"}]})
        for bad in ("public-read", "authenticated-read"):
            self.assertEqual(self.error_code(s3.put_bucket_acl, Bucket="acls", ACL=bad),
                             "NotImplemented")
            self.assertEqual(self.error_code(s3.put_object_acl, Bucket="acls", Key="k", ACL=bad),
                             "NotImplemented")
        self.assertEqual(self.error_code(s3.get_object_acl, Bucket="acls", Key="missing"),
                         "NoSuchKey")
        self.assertEqual(s3.get_object(Bucket="acls", Key="k")["Body"].read(), b"v")

    def test_unimplemented_sub_resources_answer_501_not_the_base_operation(self):
        s3 = self.s3
        s3.create_bucket(Bucket="subs")
        s3.put_object(Bucket="subs", Key="k", Body=b"object bytes")
        # Regression: GET ?attributes returned the object's bytes where XML was expected. It is
        # GetObjectAttributes now (s3_listings_test.py), XML either way.
        status, body = raw(self.server, "GET", "/subs/k?attributes",
                           headers={"x-amz-object-attributes": "ObjectSize"})
        self.assertEqual(status, 200)
        self.assertIn(b"<ObjectSize>12</ObjectSize>", body)
        status, body = raw(self.server, "GET", "/subs/k?attributes")
        self.assertEqual((status, code_of(body)), (400, "InvalidArgument"))
        self.assertNotIn(b"object bytes", body)
        for sub in ["cors", "lifecycle", "policy", "tagging", "website", "logging",
                    "encryption", "replication", "notification", "object-lock", "accelerate",
                    "requestPayment", "publicAccessBlock", "ownershipControls"]:
            for method in ("GET", "PUT", "DELETE"):
                status, body = raw(self.server, method, f"/subs?{sub}")
                self.assertEqual((status, code_of(body)), (501, "NotImplemented"),
                                 f"{method} ?{sub}")
        for sub in ["tagging", "retention", "legal-hold", "torrent"]:
            status, body = raw(self.server, "GET", f"/subs/k?{sub}")
            self.assertEqual((status, code_of(body)), (501, "NotImplemented"), sub)
        status, body = raw(self.server, "PUT", "/subs/k?tagging",
                           b"<Tagging><TagSet/></Tagging>")
        self.assertEqual(status, 501)
        # Nothing was replaced, deleted or created meanwhile.
        self.assertEqual(s3.get_object(Bucket="subs", Key="k")["Body"].read(), b"object bytes")
        self.assertEqual([o["Key"] for o in s3.list_objects_v2(Bucket="subs")["Contents"]],
                         ["k"])


class AwsCliTest(base.ServerCase):
    """Each row of the sub-resource table through Debian's awscli 2 (`aws s3api`)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env = dict(os.environ, AWS_ACCESS_KEY_ID=base.ACCESS,
                       AWS_SECRET_ACCESS_KEY=base.SECRET, AWS_DEFAULT_REGION="us-east-1",
                       AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                       AWS_PAGER="")

    def s3api(self, *args, fails_with=None):
        """The JSON answer of `aws s3api ARGS`, or (fails_with) the error code it printed."""
        p = subprocess.run([base.AWS, "--endpoint-url", self.server.endpoint, "s3api", *args],
                           capture_output=True, env=self.env, timeout=120)
        if fails_with is not None:
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(f"({fails_with})", p.stderr.decode(), args)
            return None
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return json.loads(p.stdout) if p.stdout.strip() else {}

    def test_every_row_with_aws_s3api(self):
        b = ["--bucket", "cli-rows"]
        self.s3api("create-bucket", *b)
        body = os.path.join(self.tmp.name, "body")
        with open(body, "wb") as f:
            f.write(b"row bytes")
        self.s3api("put-object", *b, "--key", "d/k", "--body", body)
        self.assertEqual(self.s3api("get-bucket-location", *b).get("LocationConstraint"), None)
        # versions, versioning
        versions = self.s3api("list-object-versions", *b)["Versions"]
        self.assertEqual([(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions],
                         [("d/k", "null", True)])
        self.assertEqual(self.s3api("get-bucket-versioning", *b), {})
        self.s3api("put-bucket-versioning", *b, "--versioning-configuration",
                   "Status=Suspended")
        self.s3api("put-bucket-versioning", *b, "--versioning-configuration", "Status=Enabled",
                   fails_with="NotImplemented")
        # acl, bucket and object
        grants = self.s3api("get-bucket-acl", *b)["Grants"]
        self.assertEqual([g["Permission"] for g in grants], ["FULL_CONTROL"])
        self.s3api("put-bucket-acl", *b, "--acl", "private")
        self.s3api("put-bucket-acl", *b, "--acl", "public-read", fails_with="NotImplemented")
        self.assertEqual(self.s3api("get-object-acl", *b, "--key", "d/k")["Owner"]["ID"],
                         "objectcache")
        self.s3api("put-object-acl", *b, "--key", "d/k", "--acl", "private")
        # attributes, versionId=null
        attrs = self.s3api("get-object-attributes", *b, "--key", "d/k", "--object-attributes",
                           "ETag", "ObjectSize")
        self.assertEqual(attrs["ObjectSize"], len(b"row bytes"))
        self.assertEqual(self.s3api("head-object", *b, "--key", "d/k", "--version-id",
                                    "null")["ContentLength"], len(b"row bytes"))
        self.s3api("head-object", *b, "--key", "d/k", "--version-id", "v1",
                   fails_with="404")
        # uploads, uploadId, listings
        upload = self.s3api("create-multipart-upload", *b, "--key", "d/m")["UploadId"]
        self.assertEqual([u["Key"] for u in self.s3api("list-multipart-uploads", *b)["Uploads"]],
                         ["d/m"])
        self.assertEqual(self.s3api("list-parts", *b, "--key", "d/m", "--upload-id",
                                    upload).get("Parts"), None)
        self.s3api("abort-multipart-upload", *b, "--key", "d/m", "--upload-id", upload)
        owned = self.s3api("list-objects-v2", *b, "--fetch-owner")["Contents"][0]
        self.assertEqual(owned["Owner"]["ID"], "objectcache")
        # not implemented: 501, never the base operation
        for args in (["get-bucket-cors", *b], ["get-bucket-tagging", *b],
                     ["get-bucket-lifecycle-configuration", *b], ["get-bucket-policy", *b],
                     ["get-object-tagging", *b, "--key", "d/k"],
                     ["get-object-retention", *b, "--key", "d/k"],
                     ["get-object", *b, "--key", "d/k", "--part-number", "1",
                      os.path.join(self.tmp.name, "part")]):
            self.s3api(*args, fails_with="NotImplemented")
        # delete with versionId=null, in one and in many
        self.s3api("delete-object", *b, "--key", "d/k", "--version-id", "null")
        self.s3api("put-object", *b, "--key", "d/k2", "--body", body)
        deleted = self.s3api("delete-objects", *b, "--delete",
                             '{"Objects": [{"Key": "d/k2", "VersionId": "null"}]}')["Deleted"]
        self.assertEqual(deleted, [{"Key": "d/k2", "VersionId": "null"}])
        self.s3api("delete-bucket", *b)


class SigV2Test(base.ServerCase):
    """Signature Version 2, as Debian's boto3 presigns by default and s3cmd signs with
    signature_v2 = True."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="sv2")
        cls.s3.put_object(Bucket="sv2", Key="k", Body=b"v2 bytes")
        # No signature_version: what a user of Debian 12's boto3 gets (SigV2 presigned URLs).
        cls.default = boto3.client("s3", endpoint_url=cls.server.endpoint,
                                   aws_access_key_id=base.ACCESS,
                                   aws_secret_access_key=base.SECRET, region_name="us-east-1")

    def fetch(self, url, method="GET", data=None, headers=None):
        # As curl -T does: no Content-Type (urllib would add a form type the URL did not sign).
        headers = {"Content-Type": "", **(headers or {})} if data is not None else headers
        return fetch(url, method, data, headers)

    def test_boto3_default_presigned_urls_work(self):
        url = self.default.generate_presigned_url("get_object", Params={"Bucket": "sv2", "Key": "k"})
        self.assertIn("AWSAccessKeyId=", url)  # SigV2, the default asked for
        self.assertEqual(self.fetch(url), (200, b"v2 bytes"))
        put = self.default.generate_presigned_url("put_object",
                                                  Params={"Bucket": "sv2", "Key": "up"})
        self.assertEqual(self.fetch(put, "PUT", b"uploaded")[0], 200)
        self.assertEqual(self.s3.get_object(Bucket="sv2", Key="up")["Body"].read(), b"uploaded")
        # The URL is for that method, that key and those x-amz headers only.
        status, body = self.fetch(put, "PUT", b"x", {"x-amz-copy-source": "/sv2/k"})
        self.assertEqual((status, code_of(body)), (403, "SignatureDoesNotMatch"))
        status, _ = self.fetch(url.replace("/sv2/k?", "/sv2/up?"))
        self.assertEqual(status, 403)
        expired = self.default.generate_presigned_url(
            "get_object", Params={"Bucket": "sv2", "Key": "k"}, ExpiresIn=-60)
        status, body = self.fetch(expired)
        self.assertEqual((status, code_of(body)), (403, "AccessDenied"))

    def test_s3cmd_with_signature_v2(self):
        work = tempfile.mkdtemp(dir=self.tmp.name)
        cfg = os.path.join(work, "s3cfg")
        with open(cfg, "w") as f:
            f.write("[default]\n"
                    f"access_key = {base.ACCESS}\nsecret_key = {base.SECRET}\n"
                    f"host_base = 127.0.0.1:{self.server.port}\n"
                    f"host_bucket = 127.0.0.1:{self.server.port}\n"
                    "use_https = False\nsignature_v2 = True\nbucket_location = us-east-1\n")

        def s3cmd(*args):
            p = subprocess.run([base.S3CMD, "-c", cfg, *args], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr.decode() + p.stdout.decode())
            return p.stdout.decode()

        data = os.urandom(16 * 1024 * 1024 + 5)  # multipart: uploads and uploadId signed too
        path = os.path.join(work, "big.bin")
        with open(path, "wb") as f:
            f.write(data)
        s3cmd("mb", "s3://v2-s3cmd")
        s3cmd("put", path, "s3://v2-s3cmd/big.bin")
        self.assertIn("s3://v2-s3cmd/big.bin", s3cmd("ls", "s3://v2-s3cmd"))
        s3cmd("get", "s3://v2-s3cmd/big.bin", os.path.join(work, "big.out"))
        with open(os.path.join(work, "big.out"), "rb") as f:
            self.assertEqual(f.read(), data)
        s3cmd("del", "s3://v2-s3cmd/big.bin")
        s3cmd("rb", "s3://v2-s3cmd")

    def test_extensions_need_sigv4(self):
        req = AWSRequest(method="POST", url=self.server.endpoint + "/sv2?lookup",
                         data=b'{"keys": ["k"]}', headers={"Content-Type": "application/json"})
        HmacV1Auth(Credentials(base.ACCESS, base.SECRET)).add_auth(req)
        r = urllib.request.Request(req.url, data=req.body, method="POST",
                                   headers=dict(req.headers.items()))
        try:
            urllib.request.urlopen(r, timeout=30)
            self.fail("a SigV2 lookup was accepted")
        except urllib.error.HTTPError as e:
            self.assertEqual((e.code, code_of(e.read())), (403, "AccessDenied"))

    def test_no_sigv2_refuses_it(self):
        with tempfile.TemporaryDirectory() as root:
            server = base.Server(root, "--no-sigv2")
            try:
                base.client(server.endpoint).create_bucket(Bucket="sv2")
                default = boto3.client("s3", endpoint_url=server.endpoint,
                                       aws_access_key_id=base.ACCESS,
                                       aws_secret_access_key=base.SECRET,
                                       region_name="us-east-1")
                url = default.generate_presigned_url("list_objects", Params={"Bucket": "sv2"})
                status, body = self.fetch(url)
                self.assertEqual((status, code_of(body)), (403, "AccessDenied"))
                self.assertIn(b"--no-sigv2", body)
            finally:
                self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    base.main()
