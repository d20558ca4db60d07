#!/usr/bin/python3
"""Drives `objectcache kv` as users and scripts do, and checks every byte.

  cli_test.py --objectcache PATH --reference scripts/keys_reference.py
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402
from support.canned_http import canned_server  # noqa: E402

OC = None
REFERENCE = None

LAYOUTS = {  # name: (layers, kv_heads, head_dim, dtype bytes)
    "llama-3.1-8b": (32, 8, 128, 2),
    "deepseek-r1-distill-qwen-7b": (28, 4, 128, 2),
}


def run(*args, stdin=None, check=True, cwd=None):
    p = subprocess.run([OC, *args], input=stdin, capture_output=True, cwd=cwd, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"objectcache {' '.join(args)} failed ({p.returncode}): "
                             f"{p.stderr.decode(errors='replace')}")
    return p


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="objectcache-cli-")
        self.store = os.path.join(self.tmp, "store")
        self.rng = random.Random(self._testMethodName)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def assertFailsCleanly(self, args, message_part, code=1):
        p = run(*args, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        err = p.stderr.decode()
        self.assertEqual(err.count("\n"), 1, f"want one line on stderr, got: {err!r}")
        self.assertIn(message_part, err)
        self.assertEqual(p.stdout, b"")

    def test_random_objects_round_trip_bit_exactly(self):
        objects = {}
        for i in range(40):
            size = self.rng.choice([0, 1, 7, 4096, 65537, 1 << 20, self.rng.randrange(3 << 20)])
            key = self.rng.choice(["", "dir/", "a b/", "ü/"]) + f"obj-{i}"
            data = self.rng.randbytes(size)
            run("kv", "put", "--store", self.store, key, self.write("in", data))
            objects[key] = data
        # One more from stdin.
        run("kv", "put", "--store", self.store, "from-stdin", "-", stdin=b"\x00\xffpiped")
        objects["from-stdin"] = b"\x00\xffpiped"
        for key, data in objects.items():
            self.assertEqual(run("kv", "get", "--store", self.store, key).stdout, data, key)
        key, data = next(iter(objects.items()))
        run("kv", "get", "--store", self.store, key, "--out", self.path("out"))
        with open(self.path("out"), "rb") as f:
            self.assertEqual(f.read(), data)
        listed = run("kv", "ls", "--store", self.store, "-l").stdout.decode().splitlines()
        self.assertEqual([l.split("\t", 1)[1] for l in listed], sorted(objects, key=str.encode))
        self.assertEqual([int(l.split("\t")[0]) for l in listed],
                         [len(objects[k]) for k in sorted(objects, key=str.encode)])
        only_dir = run("kv", "ls", "--store", self.store, "--prefix", "dir/").stdout.decode().split()
        self.assertEqual(only_dir, sorted(k for k in objects if k.startswith("dir/")))

    def test_exist_and_rm(self):
        for k in ["a", "b", "c"]:
            run("kv", "put", "--store", self.store, k, self.write("v", k.encode()))
        p = run("kv", "exist", "--store", self.store, "a", "b", "zz", "c", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(p.stdout.decode().splitlines(),
                         ["present a", "present b", "absent zz", "present c"])
        p = run("kv", "exist", "--store", self.store, "--prefix-count", "a", "b", "zz", "c",
                check=False)
        self.assertEqual(p.stdout.decode().strip(), "2")
        self.assertEqual(run("kv", "exist", "--store", self.store, "a", "c").returncode, 0)
        run("kv", "rm", "--store", self.store, "a", "b")
        self.assertEqual(run("kv", "ls", "--store", self.store).stdout.decode().split(), ["c"])
        self.assertFailsCleanly(["kv", "rm", "--store", self.store, "a"], "NotFound")
        run("kv", "rm", "--store", self.store, "-f", "a")

    def test_ls_writes_one_name_a_line_whatever_it_holds(self):
        # Names are bytes: a newline would split one into two lines, an escape sequence would
        # reach the terminal.
        for name in ["two\nlines", "esc\x1b[31mred", "back\\slash", "plain é"]:
            run("kv", "put", "--store", self.store, name, self.write("v", b"x"))
        self.assertEqual(run("kv", "ls", "--store", self.store).stdout.decode().splitlines(),
                         ["back\\\\slash", "esc\\x1b[31mred", "plain é", "two\\x0alines"])
        self.assertEqual(run("kv", "get", "--store", self.store, "two\nlines").stdout, b"x")

    def test_ls_of_an_s3_store_pages_on_and_takes_no_page_that_would_loop_or_grow(self):
        # `kv ls` pages from the last key of each page; a server that answers past the keys asked
        # for, outside the prefix, out of order or cut short with nothing in it would have it
        # page forever, and one that sends an endless page would have it hold it all.
        def page(keys, truncated):
            contents = "".join(f"<Contents><Key>{k}</Key><Size>1</Size></Contents>" for k in keys)
            return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><IsTruncated>'
                    f'{"true" if truncated else "false"}</IsTruncated>{contents}'
                    "</ListBucketResult>").encode()

        def honest(target):
            return page(["c"], False) if "start-after=b" in target else page(["a", "b"], True)

        with canned_server(honest) as port:
            self.assertEqual(run("kv", "ls", "--store", f"s3://127.0.0.1:{port}/b").stdout,
                             b"a\nb\nc\n")
        # name: (reply, the error, what was listed before it)
        liars = {
            "the same page again": (lambda t: page(["a"], True), "'a' does not come after 'a'",
                                    b"a\n"),
            "a key before the first": (lambda t: page(["b", "a"], False),
                                       "'a' does not come after 'b'", b""),
            "more keys than asked": (lambda t: page([f"k{i:04}" for i in range(1001)], False),
                                     "more keys than the 1000 asked", b""),
            "a key outside the prefix": (lambda t: page(["other"], False),
                                         "'other' is outside the prefix", b""),
            "cut short with no key": (lambda t: page([], True), "with no key in it", b""),
            "endless": (lambda t: b"<ListBucketResult>" + b" " * (17 << 20),
                        "a page of over 16777216 bytes", b""),
        }
        for name, (reply, message, listed) in liars.items():
            with self.subTest(name), canned_server(reply) as port:
                p = run("kv", "ls", "--store", f"s3://127.0.0.1:{port}/b",
                        "--prefix", "a" if "prefix" in name else "", check=False)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stderr.decode().count("\n"), 1, p.stderr)
                self.assertIn(message, p.stderr.decode())
                self.assertEqual(p.stdout, listed)

    def test_get_from_an_s3_store_believes_no_size_it_cannot_hold(self):
        # An upstream's Content-Length sized the buffer: u64 max aborted the process
        # (std::length_error), 2^61 would too (std::bad_alloc). Each is now one line and exit 1.
        for size, message in [(2**64 - 1, "bytes, over the"), (2**61, "unexpected failure")]:
            with canned_server(lambda t: b"", head={"Content-Length": str(size)}) as port:
                self.assertFailsCleanly(["kv", "get", "--store", f"s3://127.0.0.1:{port}/b", "k"],
                                        message)

    def test_a_config_key_no_command_takes_is_named(self):
        # CLI11 said "INI was not able to parse serve.bogus" (and "other.++" for a section).
        cases = {'[serve]\nlisten = "127.0.0.1:0"\nbogus = 3\n': "'bogus' in [serve] is no option",
                 "[other]\nx = 1\n": "the section [other]",
                 "bogus = 1\n": "'bogus' is set outside a section"}
        for text, message in cases.items():
            self.assertFailsCleanly(["serve", "--config", self.write("c.toml", text.encode()),
                                     "--store", self.store], message, code=2)

    def test_every_repeating_benchmark_takes_rounds_and_repeats(self):
        for name in ["keys", "s3", "ttft", "sched", "backends", "tls", "path", "nvme-kv", "evict",
                     "gpu"]:
            usage = run("bench", name, "--help").stdout.decode()
            self.assertRegex(usage, r"--(rounds,--repeats|repeats,--rounds) INT", name)

    def chunk_keys(self, layout, count):
        tokens = [str(self.rng.randrange(128256)) for _ in range(16 * count)]
        out = run("kv", "keys", "--layout", layout, *tokens).stdout.decode().split()
        self.assertEqual(len(out), count)
        return out

    def put_chunk(self, layout, key, raw):
        """Stores RAW, a chunk's KV, as KEY's chunk object of LAYOUT through kv put-chunk."""
        run("kv", "put-chunk", "--store", self.store, "--layout", layout, "--key", key,
            self.write("raw", raw))

    def put_llama_chunk(self):
        """One chunk of random llama-3.1-8b KV, stored: its layout, key and KV."""
        layout = "llama-3.1-8b"
        key = self.chunk_keys(layout, 1)[0]
        raw = self.rng.randbytes(32 * 65536)
        self.put_chunk(layout, key, raw)
        return layout, key, raw

    def test_put_chunk_then_get_layers_returns_exactly_the_right_bytes(self):
        for layout, (layers, heads, dim, width) in LAYOUTS.items():
            slice_bytes = 16 * 2 * heads * dim * width
            keys = self.chunk_keys(layout, 6)
            raw = {}
            for k in keys:
                raw[k] = self.rng.randbytes(layers * slice_bytes)
                self.put_chunk(layout, k, raw[k])
            for first, last in [(0, layers), (0, 1), (layers - 1, layers), (3, 11)]:
                order = keys[:]
                self.rng.shuffle(order)
                order = order[: self.rng.randrange(1, len(order) + 1)]
                self.write("keys", ("\n".join(order) + "\n").encode())
                want = b"".join(raw[k][l * slice_bytes:(l + 1) * slice_bytes]
                                for l in range(first, last) for k in order)
                got = run("kv", "get-layers", "--store", self.store, "--layout", layout,
                          "--keys", self.path("keys"), "--layers", f"{first}:{last}").stdout
                self.assertEqual(got, want, f"{layout} {first}:{last}")
                run("kv", "get-layers", "--store", self.store, "--layout", layout, "--keys",
                    self.path("keys"), "--layers", f"{first}:{last}", "--out", self.path("o"))
                with open(self.path("o"), "rb") as f:
                    self.assertEqual(f.read(), want)

    def test_custom_layouts_by_json_and_flags(self):
        spec = {"name": "tiny-model", "layers": 3, "kv_heads": 1, "head_dim": 8, "dtype": "fp32",
                "tokens_per_chunk": 4}
        self.write("tiny.json", json.dumps(spec).encode())
        tokens = ["1", "2", "3", "4", "5", "6", "7", "8"]
        by_json = run("kv", "keys", "--layout", self.path("tiny.json"), *tokens).stdout
        by_flags = run("kv", "keys", "--model", "tiny-model", "--num-layers", "3", "--kv-heads",
                       "1", "--head-dim", "8", "--dtype", "fp32", "--tokens-per-chunk", "4",
                       *tokens).stdout
        self.assertEqual(by_json, by_flags)
        self.assertEqual(len(by_json.split()), 2)
        key = by_json.split()[0].decode()
        raw = self.rng.randbytes(3 * 4 * 2 * 1 * 8 * 4)
        self.put_chunk(self.path("tiny.json"), key, raw)
        self.write("keys", key.encode())
        got = run("kv", "get-layers", "--store", self.store, "--layout", self.path("tiny.json"),
                  "--keys", self.path("keys"), "--layers", "1:3").stdout
        self.assertEqual(got, raw[256:])

    def test_keys_match_the_independent_reference(self):
        cases = [("llama-3.1-8b", 32, 8, 128, "bf16", ""),
                 ("llama-3.1-70b", 80, 8, 128, "bf16", "tenant-7"),
                 ("granite-3.3-8b", 40, 8, 128, "bf16", ""),
                 ("deepseek-r1-distill-qwen-7b", 28, 4, 128, "bf16", "")]
        for model, layers, heads, dim, dtype, tenant in cases:
            tokens = [str(self.rng.randrange(2**32)) for _ in range(16 * 9 + 5)]
            self.write("tokens", ",".join(tokens).encode())
            ours = run("kv", "keys", "--layout", model, "--tenant", tenant, "--namespace",
                       "--tokens", self.path("tokens")).stdout.decode().splitlines()
            ref = subprocess.run(
                ["/usr/bin/python3", REFERENCE, "--model", model, "--layers", str(layers),
                 "--kv-heads", str(heads), "--head-dim", str(dim), "--dtype", dtype, "--tenant",
                 tenant, *tokens], capture_output=True, check=True).stdout.decode().splitlines()
            self.assertEqual(ours, ref[1:], model)  # the reference prints the fingerprint first
            self.assertEqual(len(ours), 1 + 9)

    def test_bad_input_gets_one_line_and_nonzero_exit_and_writes_nothing(self):
        layout, key, raw = self.put_llama_chunk()
        before = run("kv", "ls", "--store", self.store, "-l").stdout
        self.assertFailsCleanly(["kv", "put-chunk", "--store", self.store, "--layout", layout,
                                 "--key", "xyz", self.path("raw")], "not a chunk key")
        self.assertFailsCleanly(["kv", "put-chunk", "--store", self.store, "--layout", "gpt-9",
                                 "--key", key, self.path("raw")], "unknown layout")
        self.assertFailsCleanly(["kv", "put-chunk", "--store", self.store, "--layout", layout,
                                 "--key", key[:-1] + "0", self.write("short", raw[:-1])],
                                "2097152")
        self.assertFailsCleanly(["kv", "put", "--store", self.store, "k", self.path("absent")],
                                "NotFound")
        self.assertFailsCleanly(["kv", "put", "--store", self.store, "x" * 1089,
                                 self.path("raw")], "exceeds the limit")
        self.assertFailsCleanly(["kv", "get", "--store", self.store, "missing", "--out",
                                 self.path("o1")], "NotFound")
        self.assertFalse(os.path.exists(self.path("o1")))
        self.write("keys", f"{key}\n{'0' * 32}\n".encode())
        self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout", layout,
                                 "--keys", self.path("keys"), "--layers", "0:32", "--out",
                                 self.path("o2")], "0" * 32)
        self.assertFalse(os.path.exists(self.path("o2")))
        self.write("badkeys", f"{key}\nnot-hex\n".encode())
        self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout", layout,
                                 "--keys", self.path("badkeys"), "--layers", "0:1"], "line 2")
        self.write("keys1", key.encode())
        for bad_range in ["0:33", "5:5", "x", "3:1"]:
            self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout",
                                     layout, "--keys", self.path("keys1"), "--layers", bad_range],
                                    "layer range")
        self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout",
                                 "deepseek-r1-distill-qwen-7b", "--keys", self.path("keys1"),
                                 "--layers", "0:1"], "layout")
        os.makedirs(self.path("foreign"))
        self.write("foreign/notes.txt", b"mine")
        self.assertFailsCleanly(["kv", "ls", "--store", self.path("foreign")], "not an objectcache")
        self.assertFailsCleanly(["kv", "ls", "--store", "gopher://x"], "unknown store URI scheme")
        # A capacity the store would not honour, or two of them, stops serve before it listens.
        signed = ["serve", "--access-key", "k", "--secret-key", "s"]
        serve = signed + ["--listen", "127.0.0.1:0"]
        for store, capacity, why in [
                ("mem://", "1GiB", "--capacity bounds a file:// or rados:// store"),
                (self.path("capped"), "0", "capacity of 0 holds nothing"),
                (self.path("capped") + "?capacity=1GiB", "2GiB", "'capacity' is given twice")]:
            self.assertFailsCleanly(serve + ["--store", store, "--capacity", capacity], why)
        self.assertFalse(os.path.exists(self.path("capped")))
        # A port is all digits; a host is an IP address.
        for listen, why in [("127.0.0.1:0x10", "must be HOST:PORT"),
                            ("127.0.0.1:90000", "must be HOST:PORT"),
                            ("localhost:0", "is not an IP address")]:
            self.assertFailsCleanly(signed + ["--store", "mem://", "--listen", listen], why)
        # A token id is a whole decimal number in 0..2^32-1, quoted alone when it is not one.
        sixteen = [str(t) for t in range(1, 16)]
        for token in ["-1", "4294967296", "18446744073709551615", "12abc", "0x10", "1.5"]:
            self.assertFailsCleanly(["kv", "keys", "--layout", layout, "--", token, *sixteen],
                                    f"token 0 ('{token}') is not an integer in 0..4294967295")
        # Control bytes in a token are quoted as \xNN: the message stays one printable line.
        self.write("nul-tokens", b"1 \x00\x00\x7f\\ 2")
        self.assertFailsCleanly(["kv", "keys", "--layout", layout, "--tokens",
                                 self.path("nul-tokens")], "token 1 ('\\x00\\x00\\x7f\\\\')")
        # Files are read up to a bound (a layout 64 KiB, keys and tokens 64 MiB, a chunk its
        # size): /dev/zero is refused, not loaded.
        self.assertFailsCleanly(["kv", "keys", "--layout", "/dev/zero", "1"],
                                "layout file '/dev/zero' is over 65536 bytes")
        self.assertFailsCleanly(["kv", "keys", "--layout", layout, "--tokens", "/dev/zero"],
                                "/dev/zero is over 67108864 bytes")
        self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout", layout,
                                 "--keys", "/dev/zero", "--layers", "0:1"],
                                "/dev/zero is over 67108864 bytes")
        self.assertFailsCleanly(["kv", "put-chunk", "--store", self.store, "--layout", layout,
                                 "--key", key, "/dev/zero"], "/dev/zero is over 2097152 bytes")
        self.assertEqual(run("kv", "ls", "--store", self.store, "-l").stdout, before)
        p = run("kv", "frobnicate", check=False)
        self.assertEqual(p.returncode, 2)
        for ttl in ("0", str(366 * 86400)):  # the server's range: a second to a year
            p = run("pin", "--bucket", "b", "--keys", self.path("keys1"), "--ttl", ttl,
                    check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"--ttl", p.stderr)

    def test_fetch_trusts_no_response_header_beyond_its_request(self):
        # A server that claims what was not asked for (a 1 TiB slice, more layers, more keys,
        # another first layer) gets a clear error; nothing is sized from its claim.
        import struct
        keys = run("kv", "keys", "--layout", "llama-3.1-8b", *[str(t) for t in range(16)]).stdout
        keys_file = self.write("keys", keys)
        slice_bytes = 16 * 2 * 8 * 128 * 2
        claims = {"slice": (1, 3, 1, 1 << 40, 1), "layers": (1, 3, 29, slice_bytes, 1),
                  "keys": (1, 3, 1, slice_bytes, 2), "first layer": (1, 5, 1, slice_bytes, 1)}
        for name, (hits, first, count, slice_claim, nkeys) in claims.items():
            header = b"OCLWRSP1" + struct.pack("<HHIIIQII", 2, 0, hits, first, count,
                                               slice_claim, nkeys, 0)
            with canned_server(lambda target: header) as port:
                out = self.path("out-" + name)
                p = run("fetch", "--endpoint", f"http://127.0.0.1:{port}",
                        "--bucket", "kvb", "--layout", "llama-3.1-8b", "--keys", keys_file,
                        "--layers", "3:4", "--out", out, check=False)
                self.assertEqual(p.returncode, 1, (name, p.stderr))
                self.assertIn(b"does not match the request", p.stderr, name)
                self.assertFalse(os.path.exists(out), name)

    def test_damaged_chunk_is_refused(self):
        layout, key, raw = self.put_llama_chunk()
        obj = bytearray(run("kv", "get", "--store", self.store, key).stdout)
        obj[4096 + 5 * 65536 + 99] ^= 0x10  # a bit of layer 5
        run("kv", "put", "--store", self.store, key, self.write("damaged", bytes(obj)))
        self.write("keys", key.encode())
        self.assertFailsCleanly(["kv", "get-layers", "--store", self.store, "--layout", layout,
                                 "--keys", self.path("keys"), "--layers", "0:32", "--out",
                                 self.path("o")], "checksum mismatch in layer 5")
        self.assertFalse(os.path.exists(self.path("o")))
        got = run("kv", "get-layers", "--store", self.store, "--layout", layout, "--keys",
                  self.path("keys"), "--layers", "0:5").stdout
        self.assertEqual(got, raw[:5 * 65536])

    def test_default_store_is_objectcache_data_in_the_working_directory(self):
        run("kv", "put", "here", self.write("v", b"x"), cwd=self.tmp)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "objectcache-data", "FORMAT")))
        self.assertEqual(run("kv", "get", "here", cwd=self.tmp).stdout, b"x")


def main():
    global OC, REFERENCE
    p = argument_parser()
    p.add_argument("--reference", required=True)
    args, rest = p.parse_known_args()
    OC, REFERENCE = args.objectcache, args.reference
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
