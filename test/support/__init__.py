"""What the test scripts share: the binary they run, and a server with its clients
(test/support/s3_server.py)."""

import argparse
import os


def objectcache_binary():
    """The absolute path of the objectcache binary a test script runs: its --objectcache
    argument (test/CMakeLists.txt passes the build's)."""
    p = argparse.ArgumentParser()
    p.add_argument("--objectcache", required=True)
    return os.path.abspath(p.parse_args().objectcache)
