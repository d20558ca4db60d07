#!/usr/bin/python3
"""Directories the user names are not wiped: a benchmark's --dir keeps what was in it (a
benchmark clears only the subdirectories it writes), a temporary one is removed after the run,
`bench index` removes its store directory only if the run made it, and scripts/gpu-bundle and
scripts/ceph-dev start refuse a directory that is neither empty nor their own."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402


def run(binary, args, env=None, cwd=None):
    done = subprocess.run([binary, "bench", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)
    assert done.returncode == 0, (args, done.stdout, done.stderr)


def main():
    binary = objectcache_binary()
    with tempfile.TemporaryDirectory() as tmp:
        store_args = ["store", "--objects", "4", "--put-repeats", "1", "--read-repeats", "1"]

        # A named directory: what the user had there stays, twice over (the second run clears
        # only the first run's own files).
        named = os.path.join(tmp, "named")
        os.makedirs(named)
        sentinel = os.path.join(named, "keep.txt")
        with open(sentinel, "w") as f:
            f.write("the user's file\n")
        for _ in range(2):
            run(binary, store_args + ["--dir", named])
            assert open(sentinel).read() == "the user's file\n"

        # No --dir: a temporary directory under $TMPDIR, gone after the run; nothing is left in
        # the directory the benchmark was started from.
        tmpdir, cwd = os.path.join(tmp, "tmpdir"), os.path.join(tmp, "cwd")
        os.makedirs(tmpdir)
        os.makedirs(cwd)
        run(binary, store_args, env={**os.environ, "TMPDIR": tmpdir}, cwd=cwd)
        assert os.listdir(tmpdir) == [], os.listdir(tmpdir)
        assert os.listdir(cwd) == [], os.listdir(cwd)

        # bench index: a directory that was there before is kept; one the run made is removed.
        index_args = ["index", "--objects", "2000", "--reopens", "1"]
        existing = os.path.join(tmp, "existing")
        os.makedirs(existing)
        run(binary, index_args + ["--dir", existing])
        assert os.path.isdir(existing)
        made = os.path.join(tmp, "made")
        run(binary, index_args + ["--dir", made])
        assert not os.path.exists(made)

        # scripts/gpu-bundle replaces its DIR whole and scripts/ceph-dev start wipes an old
        # cluster's directories: a directory with other files (or a file) is refused before
        # anything is built or started, and keeps them.
        scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")
        for command, says in ((["gpu-bundle"], "not an earlier bundle"),
                              (["ceph-dev", "start"], "holds no ceph-dev cluster")):
            for target in (named, sentinel):
                done = subprocess.run([os.path.join(scripts, command[0]), *command[1:], target],
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 2, (command, target, done.returncode, done.stderr)
                assert says in done.stderr, done.stderr
        assert open(sentinel).read() == "the user's file\n"
    print("ok")


if __name__ == "__main__":
    main()
