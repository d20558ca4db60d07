"""Helpers the server tests share: `objectcache serve` started on 127.0.0.1 over a fresh local
store and ended by its PID (Server, ServerCase), boto3 clients, SigV4-signed raw requests, and
the command line every test script takes (main: --objectcache PATH).

  from support import s3_server as base
"""
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import boto3
import botocore  # noqa: F401 (the test scripts catch base.botocore.exceptions)
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from . import argument_parser

OC = None
AWS = "/usr/bin/aws"
S3CMD = "/usr/bin/s3cmd"
ACCESS, SECRET = "test-access-key", "test-secret-key-0123456789"


class Server:
    """One `objectcache serve` process, ended by its PID."""

    def __init__(self, root, *extra):
        self.root = root
        self.store = os.path.join(root, "store")
        port_file = os.path.join(root, "port")
        self.log = open(os.path.join(root, "server.log"), "wb")
        env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=ACCESS, OBJECTCACHE_SECRET_KEY=SECRET)
        if "--credentials" in extra:  # every key is a tenant's
            del env["OBJECTCACHE_ACCESS_KEY"], env["OBJECTCACHE_SECRET_KEY"]
        store = [] if "--store" in extra else ["--store", self.store]  # extra's replaces it
        level = [] if "--log-level" in extra else ["--log-level", "info"]  # so does this one
        self.proc = subprocess.Popen(
            [OC, "serve", "--listen", "127.0.0.1:0", *store, "--port-file",
             port_file, *level, *extra],
            stdout=self.log, stderr=self.log, env=env)
        for _ in range(200):
            if os.path.exists(port_file):
                break
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.log_text())
            time.sleep(0.05)
        self.port = int(open(port_file).read())
        scheme = "https" if "--tls-cert" in extra else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.port}"

    def metrics_port(self):
        """The port of `--metrics-listen HOST:0`, which the kernel chose and the log names."""
        found = re.search(r"metrics on http://[^ ]*:(\d+)/metrics", self.log_text())
        if not found:
            raise AssertionError("no metrics port in the server log: " + self.log_text())
        return int(found.group(1))

    def wait_for_log(self, text, count=1):
        """Waits (at most 10 s) until `text` is in the log `count` times; AssertionError else."""
        for _ in range(200):
            if self.log_text().count(text) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"'{text}' not in the server log: {self.log_text()}")

    def log_text(self):
        self.log.flush()
        return open(self.log.name, "rb").read().decode(errors="replace")

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


def client(endpoint, access=ACCESS, secret=SECRET, verify=None, **cfg):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                        aws_secret_access_key=secret, region_name="us-east-1", verify=verify,
                        config=Config(signature_version="s3v4", retries={"max_attempts": 1},
                                      **cfg))


class ServerCase(unittest.TestCase):
    """Test classes that share one `objectcache serve` of their own: cls.server, cls.s3 (boto3
    with SigV4) and cls.tmp; setUpClass of a subclass calls super() first, then adds to them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.server = Server(cls.tmp.name)
        cls.s3 = client(cls.server.endpoint)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.tmp.cleanup()


def signed_request(endpoint, method, path, body=b"", headers=None, secret=SECRET):
    """A request signed by botocore's own SigV4 signer, for calls boto3 has no method for."""
    req = AWSRequest(method=method, url=endpoint + path, data=body, headers=headers or {})
    req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    SigV4Auth(Credentials(ACCESS, secret), "s3", "us-east-1").add_auth(req)
    return req


def send(req, body=None):
    """Sends a signed request; `body` replaces the signed body (to tamper with it)."""
    data = body if body is not None else req.body
    r = urllib.request.Request(req.url, data=data or None, method=req.method,
                               headers=dict(req.headers.items()))
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def raw_http(port, data, timeout=10):
    """Sends raw bytes to 127.0.0.1:port; what came back before the peer closed, reset or
    went quiet for `timeout` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_reply(s)


def read_reply(sock, done=None):
    """What `sock` receives until the peer closes, resets or goes quiet for its timeout, or
    until `done(bytes so far)` says the reply is whole."""
    reply = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                break
            reply += b
            if done is not None and done(reply):
                break
    except (socket.timeout, ConnectionResetError):
        pass
    return reply


def main():
    global OC
    args, rest = argument_parser().parse_known_args()
    OC = args.objectcache
    unittest.main(argv=[sys.argv[0], "-v", *rest])
