#!/usr/bin/python3
"""HTTPS: `objectcache serve --tls-cert/--tls-key` with a CA made here by the openssl CLI, used
by the three real clients (awscli, s3cmd, boto3) verifying it, and by our own client side (an
s3:// store over HTTPS, `objectcache fetch --ca-file`). A wrong CA is refused by every client;
plain HTTP to the HTTPS port gets no answer; SIGHUP serves a renewed certificate to new
connections and keeps the old one when the new files are broken.

  tls_test.py --objectcache PATH [unittest args]
"""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import unittest

import botocore.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(directory, name):
    """A CA certificate and key; returns the certificate's path."""
    key, cert = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}")
    return cert


def issue(directory, ca, name):
    """A server certificate for 127.0.0.1 and localhost signed by `ca`: (cert, key) paths."""
    key, csr = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".csr")
    cert = os.path.join(directory, name + ".pem")
    ext = os.path.join(directory, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca[:-4] + ".key",
            "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)
    return cert, key


def served_certificate_cn(port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw_sock:
        with ctx.wrap_socket(raw_sock, server_hostname="127.0.0.1") as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"]


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.ca = make_ca(d, "test-ca")
        cls.wrong_ca = make_ca(d, "other-ca")
        cls.cert, cls.key = issue(d, cls.ca, "server-one")
        # The server reads copies, so that a test can replace them and send SIGHUP.
        cls.live_cert, cls.live_key = os.path.join(d, "live.pem"), os.path.join(d, "live.key")
        shutil.copy(cls.cert, cls.live_cert)
        shutil.copy(cls.key, cls.live_key)
        cls.server = base.Server(os.path.join(d), "--tls-cert", cls.live_cert, "--tls-key",
                                 cls.live_key)
        cls.s3 = base.client(cls.server.endpoint, verify=cls.ca)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.tmp.cleanup()

    def file(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_boto3_verifies_the_ca_and_moves_bytes(self):
        self.assertTrue(self.server.endpoint.startswith("https://"))
        self.s3.create_bucket(Bucket="boto-tls")
        data = os.urandom(3 * 1024 * 1024 + 11)
        self.s3.put_object(Bucket="boto-tls", Key="k", Body=data)
        self.assertEqual(self.s3.get_object(Bucket="boto-tls", Key="k")["Body"].read(), data)
        got = self.s3.get_object(Bucket="boto-tls", Key="k", Range="bytes=100-199")
        self.assertEqual(got["Body"].read(), data[100:200])
        url = self.s3.generate_presigned_url("get_object", Params={"Bucket": "boto-tls", "Key": "k"})
        ctx = ssl.create_default_context(cafile=self.ca)
        import urllib.request
        with urllib.request.urlopen(url, context=ctx, timeout=30) as r:
            self.assertEqual(r.read(), data)
        wrong = base.client(self.server.endpoint, verify=self.wrong_ca)
        with self.assertRaises(botocore.exceptions.SSLError):
            wrong.list_buckets()

    def test_awscli(self):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=base.ACCESS,
                   AWS_SECRET_ACCESS_KEY=base.SECRET, AWS_DEFAULT_REGION="us-east-1",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")

        def aws(ca, *args):
            return subprocess.run([base.AWS, "--endpoint-url", self.server.endpoint,
                                   "--ca-bundle", ca, *args], capture_output=True, env=env,
                                  timeout=120)

        src = self.file("aws-src.bin", os.urandom(9 * 1024 * 1024))  # multipart (8 MiB parts)
        dst = os.path.join(self.tmp.name, "aws-dst.bin")
        for args in (["s3", "mb", "s3://aws-tls"], ["s3", "cp", src, "s3://aws-tls/x"],
                     ["s3", "cp", "s3://aws-tls/x", dst]):
            p = aws(self.ca, *args)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
        with open(src, "rb") as a, open(dst, "rb") as b:
            self.assertEqual(a.read(), b.read())
        p = aws(self.wrong_ca, "s3", "ls", "s3://aws-tls")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SSL", p.stderr.decode())

    def s3cmd(self, ca, *args):
        cfg = self.file("s3cfg-" + os.path.basename(ca), (
            "[default]\n"
            f"access_key = {base.ACCESS}\nsecret_key = {base.SECRET}\n"
            f"host_base = 127.0.0.1:{self.server.port}\n"
            f"host_bucket = 127.0.0.1:{self.server.port}\n"
            "use_https = True\ncheck_ssl_certificate = True\ncheck_ssl_hostname = True\n"
            f"ca_certs_file = {ca}\nsignature_v2 = False\nbucket_location = us-east-1\n"
        ).encode())
        return subprocess.run([base.S3CMD, "-c", cfg, *args], capture_output=True, timeout=120)

    def test_s3cmd(self):
        src = self.file("s3cmd-src.bin", os.urandom(70000))
        dst = os.path.join(self.tmp.name, "s3cmd-dst.bin")
        for args in (["mb", "s3://s3cmd-tls"], ["put", src, "s3://s3cmd-tls/x"],
                     ["get", "--force", "s3://s3cmd-tls/x", dst]):
            p = self.s3cmd(self.ca, *args)
            self.assertEqual(p.returncode, 0, p.stderr.decode() + p.stdout.decode())
        with open(src, "rb") as a, open(dst, "rb") as b:
            self.assertEqual(a.read(), b.read())
        p = self.s3cmd(self.wrong_ca, "ls", "s3://s3cmd-tls")
        self.assertNotEqual(p.returncode, 0)

    def test_our_s3_store_and_fetch_over_https(self):
        self.s3.create_bucket(Bucket="upstream-tls")
        store = f"s3://127.0.0.1:{self.server.port}/upstream-tls?ca_file={self.ca}"
        with tempfile.TemporaryDirectory() as root:
            gateway = base.Server(root, "--store", store)
            try:
                front = base.client(gateway.endpoint)
                front.create_bucket(Bucket="front")
                data = os.urandom(2 * 1024 * 1024 + 3)
                front.put_object(Bucket="front", Key="through-tls", Body=data)
                self.assertEqual(front.get_object(Bucket="front", Key="through-tls")["Body"].read(),
                                 data)
            finally:
                self.assertEqual(gateway.stop(), 0)
        # The upstream holds the object, reached only through HTTPS.
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket="upstream-tls")["Contents"]]
        self.assertTrue(keys)
        # Verified against the wrong CA, the store does not open: the gateway says why and exits.
        bad = f"s3://127.0.0.1:{self.server.port}/upstream-tls?ca_file={self.wrong_ca}"
        p = subprocess.run([base.OC, "serve", "--anonymous", "--listen", "127.0.0.1:0",
                            "--store", bad], capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("certificate verify failed", p.stderr.decode())

    def test_kv_put_and_fetch_over_https(self):
        # A KV bucket; chunks written by our s3:// store and read back layerwise by
        # `objectcache fetch`, both over HTTPS verified against the test CA.
        def layout_header(request, **_):
            request.headers["x-objectcache-kv-layout"] = "llama-3.1-8b"
        self.s3.meta.events.register("before-sign.s3.CreateBucket", layout_header)
        try:
            self.s3.create_bucket(Bucket="kv-tls")
        finally:
            self.s3.meta.events.unregister("before-sign.s3.CreateBucket", layout_header)
        keys = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b"] +
                              [str(3 * i) for i in range(32)], check=True,
                              capture_output=True).stdout.decode().split()
        self.assertEqual(len(keys), 2)
        env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=base.ACCESS,
                   OBJECTCACHE_SECRET_KEY=base.SECRET)
        store = f"s3://127.0.0.1:{self.server.port}/kv-tls?ca_file={self.ca}"
        raws = []
        for i, key in enumerate(keys):
            raws.append(os.urandom(32 * 65536))
            subprocess.run([base.OC, "kv", "put-chunk", "--store", store, "--layout",
                            "llama-3.1-8b", "--key", key, self.file(f"raw{i}", raws[i])],
                           check=True, env=env, timeout=60)
        keys_file = self.file("keys.txt", "\n".join(keys).encode())
        out = os.path.join(self.tmp.name, "fetched.bin")
        fetch = [base.OC, "fetch", "--endpoint", self.server.endpoint, "--bucket", "kv-tls",
                 "--layout", "llama-3.1-8b", "--keys", keys_file, "--layers", "0:2", "-o", out]
        p = subprocess.run(fetch + ["--ca-file", self.ca], capture_output=True, env=env,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        want = b"".join(raw[layer * 65536:(layer + 1) * 65536] for layer in range(2)
                        for raw in raws)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), want)
        os.unlink(out)
        for ca in (self.wrong_ca, None):  # the wrong CA; the system's CAs
            args = fetch + (["--ca-file", ca] if ca else [])
            p = subprocess.run(args, capture_output=True, env=env, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("certificate verify failed", p.stderr.decode())
            self.assertFalse(os.path.exists(out))

    def test_plain_http_and_garbage_get_no_answer(self):
        data = base.raw_http(self.server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=15)
        self.assertNotIn(b"HTTP/1.1", data)
        # A handshake with a client that trusts nothing fails; the server keeps serving.
        ctx = ssl.create_default_context(cafile=self.wrong_ca)
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as raw_sock:
            with self.assertRaises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw_sock, server_hostname="127.0.0.1")
        self.assertTrue(self.s3.list_buckets())

    def test_tls12_offers_only_forward_secret_aead_suites(self):
        def handshake(cipher):
            ctx = ssl.create_default_context(cafile=self.ca)
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(cipher)
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    return s.cipher()[0]
        self.assertEqual(handshake("ECDHE-ECDSA-AES128-GCM-SHA256"), "ECDHE-ECDSA-AES128-GCM-SHA256")
        self.assertEqual(handshake("ECDHE-ECDSA-CHACHA20-POLY1305"), "ECDHE-ECDSA-CHACHA20-POLY1305")
        for weak in ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384", "AES128-SHA",
                     "AES128-GCM-SHA256"]:
            with self.assertRaises(ssl.SSLError, msg=weak):
                handshake(weak)
        self.assertTrue(self.s3.list_buckets())

    def test_sighup_serves_a_renewed_certificate(self):
        port = self.server.port
        self.assertEqual(served_certificate_cn(port, self.ca), "server-one")
        # Broken files: the certificate in force stays.
        with open(self.live_cert, "w") as f:
            f.write("not a certificate\n")
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("keeping the TLS certificate in force")
        self.assertEqual(served_certificate_cn(port, self.ca), "server-one")
        # A renewed certificate: new connections get it; existing clients keep working.
        cert, key = issue(self.tmp.name, self.ca, "server-two")
        shutil.copy(cert, self.live_cert)
        shutil.copy(key, self.live_key)
        self.server.proc.send_signal(signal.SIGHUP)
        self.server.wait_for_log("reloaded the TLS certificate")
        self.assertEqual(served_certificate_cn(port, self.ca), "server-two")
        self.assertTrue(self.s3.list_buckets())
        shutil.copy(self.cert, self.live_cert)
        shutil.copy(self.key, self.live_key)


if __name__ == "__main__":
    base.main()
