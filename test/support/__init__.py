"""What the test scripts share (test/support/s3_server.py)."""
