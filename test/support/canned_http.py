"""A server on 127.0.0.1 that answers every GET and POST with the body a function gives for
its request target, and every HEAD with a 200 of given headers: a server that lies, for the
tests of what a client trusts.

  from support.canned_http import canned_server
  with canned_server(lambda target: b"...") as port: ...
"""
import contextlib
import http.server
import threading


@contextlib.contextmanager
def canned_server(reply, head=None):
    """Serves on a port the kernel picks, yielded; `reply(target)` is the 200 response's body
    for a GET or POST of `target` (path and query), `head` the headers of every HEAD's 200
    (default: Content-Length 0). Stopped on leaving the block."""

    class Canned(http.server.BaseHTTPRequestHandler):
        def answer(self, body):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except ConnectionError:
                pass  # the client stopped reading: what some tests expect of it

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.answer(reply(self.path))

        def do_GET(self):
            self.answer(reply(self.path))

        def do_HEAD(self):
            self.send_response(200)
            for name, value in (head or {"Content-Length": "0"}).items():
                self.send_header(name, value)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
