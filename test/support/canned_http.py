"""A server on 127.0.0.1 that answers every POST with the body a function gives for its
request target: a server that lies, for the tests of what a client trusts.

  from support.canned_http import canned_server
  with canned_server(lambda target: b"...") as port: ...
"""
import contextlib
import http.server
import threading


@contextlib.contextmanager
def canned_server(reply):
    """Serves on a port the kernel picks, yielded; `reply(target)` is the 200 response's body
    for a POST to `target` (path and query). Stopped on leaving the block."""

    class Canned(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = reply(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
