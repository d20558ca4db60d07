"""What the test scripts share: their arguments, a server with its clients
(test/support/s3_server.py), and a server that answers what a test tells it to
(test/support/canned_http.py)."""

import argparse
import os


def argument_parser():
    """A parser of a test script's arguments, with --objectcache BINARY (test/CMakeLists.txt
    passes the build's; it is read as an absolute path); a script adds its own."""
    p = argparse.ArgumentParser()
    p.add_argument("--objectcache", required=True, type=os.path.abspath,
                   help="the objectcache binary")
    return p


def objectcache_binary():
    """The objectcache binary of a test script that takes no other argument."""
    return argument_parser().parse_args().objectcache
