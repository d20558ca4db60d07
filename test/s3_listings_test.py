#!/usr/bin/python3
"""Listings in every corner (docs/s3-api.md, "Listings"): max-keys=0, ListBuckets pages
(max-buckets, continuation-token, prefix), fetch-owner, encoding-type=url in every field S3
encodes, GetObjectAttributes, and 404 (not 403) for a missing object a signed caller asks for.
boto3 where Debian's 1.26 has the call, signed raw requests where it does not.

  s3_listings_test.py --objectcache PATH [unittest args]
"""
import hashlib
import os
import re
import sys
import unittest
import urllib.parse
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
import boto3  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from s3_subresources_test import code_of, fetch, raw  # noqa: E402

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def texts(xml, path):
    """The text of every element at `path` (names without the S3 namespace)."""
    root = ET.fromstring(xml)
    return [e.text or "" for e in root.iterfind("/".join(NS + p for p in path.split("/")))]


class ListingTest(base.ServerCase):
    def get(self, path):
        status, body = raw(self.server, "GET", path)
        self.assertEqual(status, 200, body)
        return body

    def test_list_buckets_in_pages(self):
        names = [f"page-{i:02d}" for i in range(7)] + ["other-bucket"]
        for n in names:
            self.s3.create_bucket(Bucket=n)
        # No max-buckets: every bucket, no token.
        every = self.get("/")
        self.assertTrue(set(names) <= set(texts(every, "Buckets/Bucket/Name")))
        self.assertEqual(texts(every, "ContinuationToken"), [])
        seen, token, pages = [], None, 0
        while True:
            path = "/?max-buckets=3&prefix=page-"
            if token:
                path += "&continuation-token=" + urllib.parse.quote(token, safe="")
            body = self.get(path)
            page = texts(body, "Buckets/Bucket/Name")
            self.assertLessEqual(len(page), 3)
            self.assertEqual(texts(body, "Prefix"), ["page-"])
            seen += page
            pages += 1
            tokens = texts(body, "ContinuationToken")
            if not tokens:
                break
            token = tokens[0]
        self.assertEqual(seen, names[:7])
        self.assertEqual(pages, 3)
        self.assertEqual(texts(self.get("/?bucket-region=eu-west-1"), "Buckets/Bucket/Name"), [])
        for bad in ("0", "10001", "x", "18446744073709551616"):
            status, body = raw(self.server, "GET", f"/?max-buckets={bad}")
            self.assertEqual((status, code_of(body)), (400, "InvalidArgument"), bad)
        status, body = raw(self.server, "GET", "/?max-buckets=1&continuation-token=%%%")
        self.assertEqual((status, code_of(body)), (400, "InvalidArgument"))

    def test_max_keys_zero_is_an_empty_complete_page(self):
        s3 = self.s3
        s3.create_bucket(Bucket="zero")
        s3.put_object(Bucket="zero", Key="a", Body=b"1")
        s3.put_object(Bucket="zero", Key="d/b", Body=b"2")
        s3.create_multipart_upload(Bucket="zero", Key="u")
        v2 = s3.list_objects_v2(Bucket="zero", MaxKeys=0)
        self.assertEqual((v2["KeyCount"], v2["IsTruncated"]), (0, False))
        self.assertNotIn("NextContinuationToken", v2)
        v1 = s3.list_objects(Bucket="zero", MaxKeys=0, Delimiter="/")
        self.assertEqual((v1.get("Contents"), v1["IsTruncated"]), (None, False))
        self.assertNotIn("NextMarker", v1)
        versions = s3.list_object_versions(Bucket="zero", MaxKeys=0)
        self.assertEqual((versions.get("Versions"), versions["IsTruncated"]), (None, False))
        uploads = s3.list_multipart_uploads(Bucket="zero", MaxUploads=0)
        self.assertEqual((uploads.get("Uploads"), uploads["IsTruncated"]), (None, False))
        upload = s3.list_multipart_uploads(Bucket="zero")["Uploads"][0]["UploadId"]
        s3.upload_part(Bucket="zero", Key="u", UploadId=upload, PartNumber=1, Body=b"p")
        parts = s3.list_parts(Bucket="zero", Key="u", UploadId=upload, MaxParts=0)
        self.assertEqual((parts.get("Parts"), parts["IsTruncated"]), (None, False))

    def test_fetch_owner(self):
        s3 = self.s3
        s3.create_bucket(Bucket="owners")
        s3.put_object(Bucket="owners", Key="k", Body=b"v")
        owner = {"ID": "objectcache", "DisplayName": "objectcache"}
        self.assertNotIn("Owner", s3.list_objects_v2(Bucket="owners")["Contents"][0])
        self.assertEqual(s3.list_objects_v2(Bucket="owners", FetchOwner=True)["Contents"][0]
                         ["Owner"], owner)
        self.assertEqual(s3.list_objects(Bucket="owners")["Contents"][0]["Owner"], owner)
        self.assertEqual(s3.list_buckets()["Owner"], owner)

    def test_url_encoding_in_every_listing_field(self):
        s3 = self.s3
        s3.create_bucket(Bucket="enc")
        odd = ["a b/ü+c&d", "a b/x%y", "tab\there/z"]
        for k in odd:
            s3.put_object(Bucket="enc", Key=k, Body=b"v")
            s3.create_multipart_upload(Bucket="enc", Key=k)
        quote = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
        want_keys = [quote(k).replace("%2F", "/") for k in sorted(odd)]  # in the names' order
        # v2: Key, Prefix, Delimiter, StartAfter, CommonPrefixes.
        body = self.get("/enc?list-type=2&encoding-type=url&start-after=" + quote("a b/") +
                        "&prefix=" + quote("a "))
        self.assertEqual(texts(body, "Contents/Key"), want_keys[:2])
        self.assertEqual(texts(body, "StartAfter"), ["a%20b/"])
        self.assertEqual(texts(body, "Prefix"), ["a%20"])
        self.assertEqual(texts(body, "EncodingType"), ["url"])
        body = self.get("/enc?list-type=2&encoding-type=url&delimiter=" + quote("/"))
        self.assertEqual(texts(body, "CommonPrefixes/Prefix"), ["a%20b/", "tab%09here/"])
        # v1: Marker, NextMarker.
        body = self.get("/enc?encoding-type=url&delimiter=%2F&max-keys=1&marker=" + quote("a "))
        self.assertEqual(texts(body, "Marker"), ["a%20"])
        self.assertEqual(texts(body, "CommonPrefixes/Prefix"), ["a%20b/"])
        self.assertEqual(texts(body, "NextMarker"), ["a%20b/"])
        # Versions: Key, KeyMarker, NextKeyMarker.
        body = self.get("/enc?versions&encoding-type=url&max-keys=1&key-marker=" + quote("a b/"))
        self.assertEqual(texts(body, "Version/Key"), [want_keys[0]])
        self.assertEqual(texts(body, "KeyMarker"), ["a%20b/"])
        self.assertEqual(texts(body, "NextKeyMarker"), [want_keys[0]])
        # Uploads: Key, Prefix, KeyMarker, NextKeyMarker, Delimiter and CommonPrefixes.
        body = self.get("/enc?uploads&encoding-type=url&max-uploads=1&prefix=" + quote("a "))
        self.assertEqual(texts(body, "Upload/Key"), [want_keys[0]])
        self.assertEqual(texts(body, "NextKeyMarker"), [want_keys[0]])
        body = self.get("/enc?uploads&encoding-type=url&delimiter=%2F")
        self.assertEqual(texts(body, "CommonPrefixes/Prefix"), ["a%20b/", "tab%09here/"])
        self.assertEqual(texts(body, "Delimiter"), ["/"])
        # boto3 asks for url encoding itself and decodes: the names come back as stored.
        self.assertEqual(sorted(o["Key"] for o in s3.list_objects_v2(Bucket="enc")["Contents"]),
                         sorted(odd))
        self.assertEqual(sorted(u["Key"] for u in s3.list_multipart_uploads(Bucket="enc")
                                ["Uploads"]), sorted(odd))
        status, body = raw(self.server, "GET", "/enc?list-type=2&encoding-type=base64")
        self.assertEqual((status, code_of(body)), (400, "InvalidArgument"))

    def test_list_uploads_with_a_delimiter_pages_by_prefix(self):
        s3 = self.s3
        s3.create_bucket(Bucket="updelim")
        for k in ("a/1", "a/2", "b", "c/1"):
            s3.create_multipart_upload(Bucket="updelim", Key=k)
        first = s3.list_multipart_uploads(Bucket="updelim", Delimiter="/", MaxUploads=2)
        self.assertEqual([p["Prefix"] for p in first["CommonPrefixes"]], ["a/"])
        self.assertEqual([u["Key"] for u in first["Uploads"]], ["b"])
        self.assertTrue(first["IsTruncated"])
        rest = s3.list_multipart_uploads(Bucket="updelim", Delimiter="/",
                                         KeyMarker=first["NextKeyMarker"],
                                         UploadIdMarker=first["NextUploadIdMarker"])
        self.assertEqual([p["Prefix"] for p in rest["CommonPrefixes"]], ["c/"])
        self.assertNotIn("Uploads", rest)
        self.assertFalse(rest["IsTruncated"])

    def test_get_object_attributes(self):
        s3 = self.s3
        s3.create_bucket(Bucket="attrs")
        s3.put_object(Bucket="attrs", Key="one", Body=b"12345")
        every = ["ETag", "ObjectSize", "StorageClass", "ObjectParts", "Checksum"]
        a = s3.get_object_attributes(Bucket="attrs", Key="one", ObjectAttributes=every)
        self.assertEqual(a["ETag"], hashlib.md5(b"12345").hexdigest())  # unquoted, as S3
        self.assertEqual((a["ObjectSize"], a["StorageClass"]), (5, "STANDARD"))
        self.assertNotIn("ObjectParts", a)  # not a multipart object
        self.assertNotIn("Checksum", a)  # none is kept
        only = s3.get_object_attributes(Bucket="attrs", Key="one", ObjectAttributes=["ObjectSize"])
        self.assertEqual(only["ObjectSize"], 5)
        self.assertNotIn("ETag", only)
        up = s3.create_multipart_upload(Bucket="attrs", Key="multi")["UploadId"]
        parts = [s3.upload_part(Bucket="attrs", Key="multi", UploadId=up, PartNumber=n,
                                Body=b"p" * (5 << 20 if n == 1 else 10))["ETag"]
                 for n in (1, 2)]
        s3.complete_multipart_upload(
            Bucket="attrs", Key="multi", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e}
                                       for n, e in enumerate(parts)]})
        m = s3.get_object_attributes(Bucket="attrs", Key="multi", ObjectAttributes=every)
        self.assertEqual(m["ObjectParts"]["TotalPartsCount"], 2)
        self.assertEqual(m["ObjectSize"], (5 << 20) + 10)
        self.assertTrue(m["ETag"].endswith("-2"))
        status, body = raw(self.server, "GET", "/attrs/one?attributes",
                           headers={"x-amz-object-attributes": "ETag,Colour"})
        self.assertEqual((status, code_of(body)), (400, "InvalidArgument"))
        status, body = raw(self.server, "GET", "/attrs/one?attributes")
        self.assertEqual((status, code_of(body)), (400, "InvalidArgument"))
        with self.assertRaises(ClientError) as e:
            s3.get_object_attributes(Bucket="attrs", Key="missing", ObjectAttributes=["ETag"])
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchKey")

    def test_a_missing_object_is_404_to_a_caller_who_may_list(self):
        s3 = self.s3
        s3.create_bucket(Bucket="gone")
        for name, call in (("GET", lambda: s3.get_object(Bucket="gone", Key="k")),
                           ("HEAD", lambda: s3.head_object(Bucket="gone", Key="k")),
                           ("ACL", lambda: s3.get_object_acl(Bucket="gone", Key="k")),
                           ("attributes", lambda: s3.get_object_attributes(
                               Bucket="gone", Key="k", ObjectAttributes=["ETag"])),
                           ("copy", lambda: s3.copy_object(Bucket="gone", Key="c",
                                                           CopySource="gone/k"))):
            with self.assertRaises(ClientError) as e:
                call()
            self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 404,
                             name)
        for signer in (s3, boto3.client("s3", endpoint_url=self.server.endpoint,
                                             aws_access_key_id=base.ACCESS,
                                             aws_secret_access_key=base.SECRET,
                                             region_name="us-east-1")):  # SigV4, then SigV2
            url = signer.generate_presigned_url("get_object", Params={"Bucket": "gone",
                                                                      "Key": "k"})
            status, body = fetch(url)
            self.assertEqual((status, code_of(body)), (404, "NoSuchKey"), url)
        # Unsigned: the caller may not list, and learns nothing about the name.
        status, body = fetch(self.server.endpoint + "/gone/k")
        self.assertEqual((status, code_of(body)), (403, "AccessDenied"))
        self.assertIsNone(re.search(rb"NoSuch", body))


if __name__ == "__main__":
    base.main()
