#!/usr/bin/python3
"""The operational endpoints and JSON logs of `objectcache serve` (docs/s3-api.md, "Health and
metrics"): /healthz and /readyz unauthenticated on the S3 port and on --metrics-listen's port,
a signed request to those paths is an ordinary bucket request, /readyz turns 503 when the store
stops answering (an s3:// store whose upstream is stopped) while /healthz stays 200, and
--log-format json writes one JSON object a line, and a text line cannot be forged by a request.

  server_health_test.py --objectcache PATH [unittest args]
"""
import json
import os
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import s3_server as base  # noqa: E402
from s3_subresources_test import code_of, fetch, raw  # noqa: E402


class HealthTest(unittest.TestCase):
    def test_health_and_readiness_on_the_s3_port(self):
        with tempfile.TemporaryDirectory() as root:
            server = base.Server(root, "--log-format", "json")
            try:
                self.assertEqual(fetch(server.endpoint + "/healthz"), (200, b"ok\n"))
                self.assertEqual(fetch(server.endpoint + "/readyz"), (200, b"ready\n"))
                # Signed, the path names a bucket like any other.
                status, body = raw(server, "GET", "/healthz")
                self.assertEqual((status, code_of(body)), (404, "NoSuchBucket"))
                # Other unsigned requests are still refused.
                self.assertEqual(fetch(server.endpoint + "/healthz/x")[0], 403)
                status, _ = fetch(server.endpoint + "/healthz", method="DELETE")
                self.assertEqual(status, 403)
            finally:
                self.assertEqual(server.stop(), 0)
            lines = [line for line in server.log_text().splitlines() if line.strip()]
            self.assertTrue(lines)
            for line in lines:
                entry = json.loads(line)
                self.assertEqual(set(entry), {"time", "level", "msg"}, line)
                self.assertIn(entry["level"], ("debug", "info", "warn", "error"))
            self.assertTrue(any("listening on" in json.loads(x)["msg"] for x in lines))

    def test_on_the_metrics_port_too(self):
        with tempfile.TemporaryDirectory() as root:
            server = base.Server(root, "--metrics-listen", "127.0.0.1:0")
            try:
                port = server.metrics_port()
                ops = f"http://127.0.0.1:{port}"
                self.assertEqual(fetch(ops + "/healthz"), (200, b"ok\n"))
                self.assertEqual(fetch(ops + "/readyz"), (200, b"ready\n"))
                self.assertEqual(fetch(ops + "/metrics")[0], 200)
                self.assertEqual(fetch(ops + "/other")[0], 404)
                # The S3 port keeps health but no longer answers metrics.
                self.assertEqual(fetch(server.endpoint + "/healthz")[0], 200)
                self.assertEqual(fetch(server.endpoint + "/metrics")[0], 403)
            finally:
                self.assertEqual(server.stop(), 0)

    def test_readyz_fails_when_the_store_stops_answering(self):
        with tempfile.TemporaryDirectory() as up_root, tempfile.TemporaryDirectory() as root:
            upstream = base.Server(up_root)
            stopped = False
            try:
                base.client(upstream.endpoint).create_bucket(Bucket="backing")
                store = f"s3://127.0.0.1:{upstream.port}/backing"
                gateway = base.Server(root, "--store", store)
                try:
                    self.assertEqual(fetch(gateway.endpoint + "/readyz"), (200, b"ready\n"))
                    self.assertEqual(upstream.stop(), 0)
                    stopped = True
                    status, body = fetch(gateway.endpoint + "/readyz")
                    self.assertEqual(status, 503, body)
                    self.assertTrue(body.startswith(b"not ready: "), body)
                    self.assertEqual(fetch(gateway.endpoint + "/healthz"), (200, b"ok\n"))
                finally:
                    self.assertEqual(gateway.stop(), 0)
            finally:
                if not stopped:
                    upstream.stop()

    def test_a_request_cannot_forge_a_text_log_line(self):
        # The presigned credential is quoted into a debug line of the log; its newline is
        # written as \x0a, so the line after it is not an event of the server's.
        forged = "AKIA/x\n2026-12-01T00:00:00.000Z ERROR forged\x00by a client"
        query = urllib.parse.urlencode({
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": forged,
            "X-Amz-Date": "20261201T000000Z", "X-Amz-Expires": "60",
            "X-Amz-SignedHeaders": "host", "X-Amz-Signature": "0" * 64},
            quote_via=urllib.parse.quote)
        with tempfile.TemporaryDirectory() as root:
            server = base.Server(root, "--log-level", "debug")
            try:
                status, body = fetch(f"{server.endpoint}/bucket/key?{query}")
                self.assertEqual((status, code_of(body)),
                                 (400, "AuthorizationQueryParametersError"))
                server.wait_for_log("ERROR forged")
            finally:
                self.assertEqual(server.stop(), 0)
            log = server.log_text()
            self.assertIn("AKIA/x\\x0a2026-12-01T00:00:00.000Z ERROR forged\\x00by a client", log)
            event = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) "
            for line in log.splitlines():
                self.assertRegex(line, event)

    def test_a_bad_log_format_is_refused(self):
        p = base.subprocess.run([base.OC, "serve", "--anonymous", "--log-format", "xml"],
                                capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--log-format", p.stderr)


if __name__ == "__main__":
    base.main()
