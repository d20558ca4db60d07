#!/usr/bin/python3
"""The Python package against a real `objectcache serve` (docs/python.md): keys, retrieval into
torch tensors and buffers in every mode, the layerwise save path, bad arguments, and the
reference engine's prefix caching through the vLLM-shaped connector: logits with a restored
prefix equal a full recompute's, also when chunks are damaged, missing or the server dies.

  python_test.py --objectcache PATH --python-dir BUILD/python [unittest args]
"""
import ctypes
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402
from support import s3_server as base  # noqa: E402
from support.canned_http import canned_server  # noqa: E402

objectcache = torch = engine = connector = None
PYTHON_DIR = None
MODES = ["S3Agg-LW", "S3Agg-CW", "S3-LW", "S3-CW"]
# A small model: a prefill is milliseconds, and 4 layers x 2 KV heads x 16 dims is enough to
# make every layer, head and position count.
CONFIG = dict(vocab_size=256, hidden=64, layers=4, heads=4, kv_heads=2, intermediate=160)


def random_kv(layout, chunks, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (chunks, layout.layers, layout.layer_slice_bytes // 4)
    return torch.randn(*shape, generator=g, dtype=torch.float32)


class PackageCase(base.ServerCase):
    """A server with bucket kvs, and chunks of a small fp32 layout stored there."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="kvs")
        cls.layout = objectcache.Layout(3, 2, 8, "fp32", 16, "test-model")

    def client(self, **kw):
        return objectcache.Client([self.server.endpoint], "kvs", self.layout,
                                  access_key=base.ACCESS, secret_key=base.SECRET, **kw)

    def stored_chunks(self, n, seed):
        """n chunks stored under fresh keys: (keys, kv [n, layers, slice floats])."""
        keys = objectcache.chunk_keys(range(seed * 10000, seed * 10000 + 16 * n), self.layout)
        kv = random_kv(self.layout, n, seed)
        c = self.client()
        for j, key in enumerate(keys):
            c.store(key, kv[j])
        c.flush()
        self.assertEqual(c.stats()["stored"], n)
        return keys, kv


class PackageTest(PackageCase):
    def test_keys_are_the_clis_and_every_scope_separates(self):
        tokens = list(range(40))
        for scope in [{}, {"tenant": "acme"}, {"adapter": "sql-lora"},
                      {"adapter": "sql-lora", "cache_salt": "user-7"}]:
            flags = [f"--{k.replace('_', '-')}={v}" for k, v in scope.items()]
            cli = subprocess.run([base.OC, "kv", "keys", "--layout", "llama-3.1-8b", *flags] +
                                 [str(t) for t in tokens], check=True, capture_output=True)
            keys = objectcache.chunk_keys(tokens, objectcache.Layout.preset("llama-3.1-8b"),
                                          **scope)
            self.assertEqual([k.hex() for k in keys], cli.stdout.decode().split())
        layout = objectcache.Layout.preset("llama-3.1-8b")
        seen = {}
        for adapter in [None, "a", "b"]:
            for salt in [None, "x", "y"]:
                for k in objectcache.chunk_keys(range(64), layout, adapter=adapter,
                                                cache_salt=salt):
                    self.assertNotIn(k, seen, (adapter, salt, seen.get(k)))
                    seen[k] = (adapter, salt)
        # The golden vector of docs/keys.md.
        self.assertEqual(objectcache.chunk_keys(range(40), layout)[0].hex(),
                         "6d0f5c5d66016c150b2cafada81c8810")

    def test_imports_after_cmake_install(self):
        build = os.path.dirname(PYTHON_DIR)
        with tempfile.TemporaryDirectory() as prefix:
            subprocess.run(["cmake", "--install", build, "--prefix", prefix], check=True,
                           capture_output=True, timeout=120)
            # The configuration follows the prefix given at install time: a prefixed install
            # never writes the machine's /etc (the Debian package's test purges it meanwhile).
            self.assertTrue(os.path.isfile(os.path.join(prefix, "etc", "objectcache",
                                                        "objectcache.toml")))
            # The credentials are readable by their owner and group only, as in the package.
            secrets = os.path.join(prefix, "etc", "objectcache", "credentials.toml")
            self.assertEqual(os.stat(secrets).st_mode & 0o777, 0o640)
            site = os.path.join(prefix, "lib", "python3", "dist-packages")
            out = subprocess.run(
                [sys.executable, "-c", "import objectcache, objectcache.engine, "
                 "objectcache.connector; print(objectcache.__file__); "
                 "print(objectcache.Layout.preset('llama-3.1-8b').layers)"],
                env=dict(os.environ, PYTHONPATH=site), cwd=prefix, capture_output=True,
                text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            where, layers = out.stdout.split()
            self.assertTrue(where.startswith(site), where)
            self.assertEqual(layers, "32")

    def test_layouts_from_model_shapes(self):
        mla = objectcache.layout_for_model("deepseek-v3", 61, 1, 576, torch.bfloat16,
                                           latent=True)
        self.assertTrue(mla.latent)
        self.assertEqual(mla.layer_slice_bytes, 16 * 576 * 2)  # one vector a token, not K and V
        gqa = objectcache.layout_for_model("deepseek-v3", 61, 1, 576, torch.bfloat16)
        self.assertEqual(gqa.layer_slice_bytes, 2 * mla.layer_slice_bytes)
        self.assertNotEqual(mla.fingerprint, gqa.fingerprint)
        self.assertNotEqual(objectcache.chunk_keys(range(16), mla),
                            objectcache.chunk_keys(range(16), gqa))
        self.assertEqual(objectcache.Layout.from_json(mla.to_json()), mla)
        with self.assertRaises(TypeError):
            objectcache.layout_for_model("m", 2, 2, 8, torch.int64)

    def test_retrieve_into_tensors_buffers_and_pages_in_every_mode(self):
        keys, kv = self.stored_chunks(5, 1)
        c = self.client()
        self.assertEqual(c.lookup(keys), 5)
        floats = self.layout.layer_slice_bytes // 4
        for mode in MODES:
            dest = [torch.zeros(5, floats) for _ in range(3)]
            r = c.retrieve_layerwise(keys, 3, dest, mode=mode)
            self.assertEqual(r.hits, 5)
            for layer in range(3):
                r.wait_for_layer(layer)
                self.assertTrue(torch.equal(dest[layer], kv[:, layer]), (mode, layer))
            r.wait()
            # Paged: [num_blocks, 2, 16, kv_heads, head_dim], chunks into scattered blocks.
            pages = [torch.zeros(9, 2, 16, 2, 8) for _ in range(2)]
            table = [7, 0, 4, 2, 8]
            r = c.retrieve_layerwise(keys, (1, 3), pages, mode=mode, block_table=table)
            r.wait()
            for i, layer in enumerate((1, 2)):
                for j, block in enumerate(table):
                    self.assertTrue(torch.equal(pages[i][block].flatten(), kv[j, layer]))
                untouched = [b for b in range(9) if b not in table]
                self.assertEqual(pages[i][untouched].abs().sum().item(), 0)
        # Any writable buffer: a bytearray per layer.
        bufs = [bytearray(5 * self.layout.layer_slice_bytes) for _ in range(3)]
        c.retrieve_layerwise(keys, 3, bufs).wait()
        for layer in range(3):
            self.assertEqual(bytes(bufs[layer]), kv[:, layer].numpy().tobytes())
        # A prefix that stops at a missing key.
        other = objectcache.chunk_keys(range(900000, 900016), self.layout)
        dest = [torch.zeros(6, floats) for _ in range(3)]
        r = c.retrieve_layerwise(keys[:2] + other + keys[2:], 3, dest)
        self.assertEqual(r.hits, 2)
        r.wait()
        self.assertTrue(torch.equal(dest[0][:2], kv[:2, 0]))

    def test_a_buffer_being_written_cannot_be_resized(self):
        # While a retrieval may write into a bytearray, the binding holds its buffer export:
        # resizing it (which would move its memory to other Python objects' use) fails.
        keys, kv = self.stored_chunks(2, 7)
        bufs = [bytearray(2 * self.layout.layer_slice_bytes) for _ in range(3)]
        r = self.client().retrieve_layerwise(keys, 3, bufs)
        for buf in bufs:
            with self.assertRaises(BufferError):
                buf.extend(b"x" * 4096)
            with self.assertRaises(BufferError):
                del buf[:100]
        r.wait()
        del r
        for layer, buf in enumerate(bufs):
            self.assertEqual(bytes(buf), kv[:, layer].numpy().tobytes())
            buf.extend(b"x")  # released with the retrieval

    def test_save_layer_by_layer(self):
        keys = objectcache.chunk_keys(range(20000, 20000 + 64), self.layout)
        kv = random_kv(self.layout, 4, 2)
        c = self.client()
        save = c.start_save(keys)
        self.assertFalse(save.dropped)
        pages = [torch.zeros(6, 2, 16, 2, 8) for _ in range(3)]
        table = [5, 1, 3, 0]
        for layer in [2, 0, 1]:  # any order; stored once the last is in
            for j, block in enumerate(table):
                pages[layer][block] = kv[j, layer].view(2, 16, 2, 8)
            save.save_layer(layer, pages[layer], block_ids=table)
            pages[layer].zero_()  # the engine may reuse its blocks at once
        with self.assertRaises(objectcache.Error) as e:
            save.save_layer(1, pages[1], block_ids=table)
        self.assertEqual(e.exception.code, "InvalidArgument")
        c.flush()
        self.assertEqual(c.stats()["stored"], 4)
        dest = [torch.zeros(4, self.layout.layer_slice_bytes // 4) for _ in range(3)]
        self.client().retrieve_layerwise(keys, 3, dest).wait()
        for layer in range(3):
            self.assertTrue(torch.equal(dest[layer], kv[:, layer]))
        # A queue too small for the save drops it, counts it and never blocks.
        small = self.client(write_behind_bytes=self.layout.chunk_object_bytes)
        save = small.start_save(keys)
        self.assertTrue(save.dropped)
        save.save_layer(0, dest[0])
        self.assertEqual(small.stats()["dropped"], 4)
        # A save abandoned before its last layer stores nothing and gives its room back.
        partial = self.client(write_behind_bytes=4 * self.layout.chunk_object_bytes)
        s = partial.start_save(keys)
        s.save_layer(0, dest[0])
        del s
        self.assertFalse(partial.start_save(keys).dropped)

    def test_bad_arguments_raise_and_write_nothing(self):
        keys, kv = self.stored_chunks(2, 3)
        c = self.client()
        floats = self.layout.layer_slice_bytes // 4
        big = torch.full((3, floats), 7.0)
        cases = [
            ([torch.zeros(2, floats, dtype=torch.float16)] * 3, {}, TypeError),    # dtype
            ([big[:1]] * 3, {}, ValueError),                                    # too small
            ([torch.zeros(floats, 2).t()] * 3, {}, ValueError),                 # not contiguous
            ([bytes(2 * floats * 4)] * 3, {}, ValueError),                      # read-only
            ([torch.zeros(2, floats)] * 2, {}, ValueError),                     # layer count
            ("not memory", {}, TypeError),
            ([torch.zeros(4, 2, 16, 2, 8)] * 3, {"block_table": [0, 0]}, ValueError),
            ([torch.zeros(4, 2, 16, 2, 8)] * 3, {"block_table": [0, 4]}, ValueError),
            ([torch.zeros(4, 2, 16, 2, 8)] * 3, {"block_table": [-1, 2]}, ValueError),
            ([torch.zeros(4, 2, 16, 2, 8)] * 3, {"block_table": [2 ** 64, 2]}, ValueError),
            ([torch.zeros(4, 2, 16, 2, 8)] * 3, {"block_table": [0.5, 2]}, TypeError),
            ([torch.zeros(4, 2, 8, 2, 8)] * 3, {"block_table": [0, 1]}, ValueError),
            ([torch.zeros(2, floats)] * 3, {"mode": "S3-XX"}, ValueError),
        ]
        for dest, kw, error in cases:
            with self.assertRaises(error, msg=(kw, error)):
                c.retrieve_layerwise(keys, 3, dest, **kw)
        self.assertEqual(big.sum().item(), 7.0 * big.numel())  # nothing written past
        # Every Python int is judged by its value (-1 and 2**64 too); what is no int is a TypeError.
        for bad_layers in [(2, 1), (0, 4), 0, (-1, 2), -1, 2 ** 64, (0, 2 ** 64), [1, 0]]:
            with self.assertRaises(ValueError, msg=bad_layers):
                c.retrieve_layerwise(keys, bad_layers, [torch.zeros(2, floats)] * 3)
        for bad_layers in ["03", (0, 1.5), (0, 1, 2), None]:
            with self.assertRaises(TypeError, msg=bad_layers):
                c.retrieve_layerwise(keys, bad_layers, [torch.zeros(2, floats)] * 3)
        for bad_key in [b"short", "zz" * 16, 7]:
            with self.assertRaises((ValueError, TypeError)):
                c.lookup([bad_key])
        with self.assertRaises(ValueError):
            objectcache.chunk_keys([-1] * 16, self.layout)
        for token in [2 ** 32, 2 ** 64, -2 ** 70]:
            with self.assertRaises(ValueError) as e:
                objectcache.chunk_keys([token] * 16, self.layout)
            self.assertIn(f"token id {token} is outside 0..4294967295", str(e.exception))
        with self.assertRaises(TypeError):
            objectcache.chunk_keys(["1"] * 16, self.layout)
        with self.assertRaises(ValueError):
            c.store(keys[0], torch.zeros(3))
        # Keys of another layout: the server finds objects, but not of this layout: no hits.
        other = objectcache.Client([self.server.endpoint], "kvs",
                                   objectcache.Layout(3, 2, 8, "fp32", 16, "other-model"),
                                   access_key=base.ACCESS, secret_key=base.SECRET)
        wrong = objectcache.Layout(3, 1, 8, "fp32", 16, "test-model")
        wrong_client = objectcache.Client([self.server.endpoint], "kvs", wrong,
                                          access_key=base.ACCESS, secret_key=base.SECRET)
        dest = [torch.full((2, floats // 2), 3.0) for _ in range(3)]
        r = wrong_client.retrieve_layerwise(keys, 3, dest)
        self.assertEqual(r.hits, 0)
        r.wait()
        self.assertTrue(all(d.eq(3.0).all() for d in dest))
        self.assertEqual(other.lookup(objectcache.chunk_keys(range(30000, 30032),
                                                             other.layout)), 0)
        # Client options outside their range, NaN included, are the caller's mistake.
        for bad in ({"timeout": float("nan")}, {"timeout": 0}, {"aggregated_streams": 9},
                    {"retries": -1}, {"parallel_requests": 0}):
            with self.assertRaises(ValueError, msg=bad):
                objectcache.Client([self.server.endpoint], "kvs", self.layout, **bad)
        # Counts past their C type are named, not a signature dump; so is a count of another
        # type. A torch integer is a count like any other.
        for name, value, exc, text in [
                ("retries", 2 ** 31, ValueError, f"retries {2 ** 31} is outside 0..100"),
                ("parallel_requests", 2 ** 64, ValueError, f"parallel_requests {2 ** 64} is"),
                ("aggregated_streams", -2 ** 63, ValueError, f"aggregated_streams {-2 ** 63} is"),
                ("dram_tier_bytes", -1, ValueError, "dram_tier_bytes -1 is outside 0..2**64-1"),
                ("write_behind_bytes", 2 ** 64, ValueError, f"write_behind_bytes {2 ** 64} is"),
                ("retries", 1.0, TypeError, "retries must be an integer, not float")]:
            with self.assertRaises(exc, msg=name) as e:
                objectcache.Client([self.server.endpoint], "kvs", self.layout, **{name: value})
            self.assertIn(text, str(e.exception))
        objectcache.Client([self.server.endpoint], "kvs", self.layout, retries=torch.tensor(2),
                           parallel_requests=torch.tensor(4))
        # Errors of the server side carry the code.
        unsigned = objectcache.Client([self.server.endpoint], "kvs", self.layout,
                                      access_key="nobody", secret_key="wrong-secret", retries=0)
        with self.assertRaises(objectcache.Error) as e:
            unsigned.lookup(keys)
        self.assertIn(e.exception.code, ("PermissionDenied", "Unauthenticated"))

    def test_a_server_is_trusted_for_no_more_than_it_was_asked(self):
        # A lookup's count past the keys sent (2^32 + 3 was read as 3) and a reply too large for
        # what was asked (a pin's is at most 8192 keys) are DataLoss, not answers.
        replies = {"lookup": b'{"present_prefix": 4294967299}',
                   "pin": b'{"missing": [' + b'"00",' * (1 << 19) + b'"00"]}'}
        stranger = "ab" * 16  # a key the pin did not send
        with canned_server(lambda target: replies[target.split("?")[1]]) as port:
            c = objectcache.Client([f"http://127.0.0.1:{port}"], "kvs", self.layout,
                                   access_key=base.ACCESS, secret_key=base.SECRET, retries=0)
            keys = objectcache.chunk_keys(range(48), self.layout)
            with self.assertRaises(objectcache.Error) as e:
                c.lookup(keys)
            self.assertEqual((e.exception.code, e.exception.message),
                             ("DataLoss", "lookup: malformed reply"))
            with self.assertRaises(objectcache.Error) as e:
                c.pin(keys, 60)
            self.assertEqual(e.exception.code, "DataLoss")
            self.assertIn("pin: the reply is over 1048576 bytes", e.exception.message)
            replies["pin"] = b'{"missing": ["%s"]}' % stranger.encode()
            with self.assertRaises(objectcache.Error) as e:
                c.pin(keys, 60)
            self.assertEqual(e.exception.message,
                             "pin: the reply names a key that was not sent: " + stranger)
            replies["pin"] = b'{"missing": ["%s"]}' % keys[1].hex().encode()
            self.assertEqual(c.pin(keys, 60), [keys[1]])


class CudaStandIn:
    """A CUDA tensor as the binding sees one (device cuda:0, data_ptr, shape, strides, dtype),
    viewing memory of the emulated device: `host` reads and writes the same bytes here."""

    def __init__(self, host):
        self.host = host
        self.device = types.SimpleNamespace(type="cuda", index=0)
        self.dtype, self.shape, self.requires_grad = host.dtype, host.shape, False

    @classmethod
    def empty(cls, dev, shape, dtype):
        nbytes = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
        memory = (ctypes.c_uint8 * nbytes).from_address(dev.allocate(nbytes))
        return cls(torch.frombuffer(memory, dtype=torch.uint8).view(dtype).view(*shape))

    def data_ptr(self):
        return self.host.data_ptr()

    def stride(self):
        return self.host.stride()

    def element_size(self):
        return self.host.element_size()

    def is_contiguous(self):
        return self.host.is_contiguous()


class DeviceTest(PackageCase):
    """Retrieval into and saves from paged KV caches in device memory (docs/gpu.md), with CUDA
    tensors standing on the emulated device (copies delayed on purpose)."""

    BLOCKS = 12

    def setUp(self):
        self.dev = objectcache.Device("emulated", copy_delay_ms=1)
        self.blocks = [9, 2, 7, 4, 11]

    def caches(self, order="2BNHD"):
        """One paged cache per layer, zeroed, in FLASH_ATTN's shape (or FlashInfer's)."""
        lay = self.layout
        shape = {"2BNHD": (2, self.BLOCKS, 16, lay.kv_heads, lay.head_dim),
                 "B2NHD": (self.BLOCKS, 2, 16, lay.kv_heads, lay.head_dim)}[order]
        out = [CudaStandIn.empty(self.dev, shape, torch.float32) for _ in range(lay.layers)]
        for c in out:
            c.host.zero_()
        return out

    @staticmethod
    def block(cache, order, b):
        """Block b of a cache as [2, tokens, heads, dim]."""
        return cache.host[:, b] if order == "2BNHD" else cache.host[b]

    def expect_blocks(self, caches, kv, chunks, order="2BNHD"):
        lay = self.layout
        for layer, cache in enumerate(caches):
            for j in range(chunks):
                want = kv[j, layer].view(2, 16, lay.kv_heads, lay.head_dim)
                self.assertTrue(torch.equal(self.block(cache, order, self.blocks[j]), want),
                                f"layer {layer} chunk {j}")
            others = [b for b in range(self.BLOCKS) if b not in self.blocks[:chunks]]
            for b in others:
                self.assertEqual(int(self.block(cache, order, b).abs().sum()), 0, f"block {b}")

    def test_a_cuda_tensor_goes_through_the_device_path(self):
        keys, kv = self.stored_chunks(4, seed=41)
        for order in ["2BNHD", "B2NHD"]:
            caches = self.caches(order)
            r = self.client().retrieve_to_device(keys + [bytes(16)], 3, caches, self.blocks,
                                                 order=order, device=self.dev, staging_layers=2)
            self.assertEqual(r.hits, 4)
            r.wait_for_layer(0)
            r.stream_wait_for_layer(1, self.dev.new_stream())
            r.wait()
            self.expect_blocks(caches, kv, 4, order)
            stats = r.stats()
            self.assertEqual(stats["layers"], 3)
            self.assertEqual(stats["staging_bytes"], 2 * 5 * self.layout.layer_slice_bytes)

    def test_torch_integers_serve_as_block_ids_and_layers(self):
        # An engine's block table may be a tensor: its elements are integers (__index__).
        keys, kv = self.stored_chunks(3, seed=46)
        caches = self.caches()
        r = self.client().retrieve_to_device(keys, (torch.tensor(0), torch.tensor(3)), caches,
                                             torch.tensor(self.blocks), device=self.dev)
        r.wait()
        self.expect_blocks(caches, kv, 3, "2BNHD")

    def test_strided_views_into_one_shared_buffer(self):
        # vLLM's per-layer views into one buffer: [blocks, layers, 2, tokens, heads, dim].
        lay = self.layout
        whole = CudaStandIn.empty(self.dev, (self.BLOCKS, lay.layers, 2, 16, lay.kv_heads,
                                             lay.head_dim), torch.float32)
        whole.host.zero_()
        caches = [CudaStandIn(whole.host[:, layer]) for layer in range(lay.layers)]
        self.assertFalse(caches[0].is_contiguous())
        keys, kv = self.stored_chunks(3, seed=42)
        r = self.client().retrieve_to_device(keys, 3, caches, self.blocks, order="B2NHD",
                                             device=self.dev)
        r.wait()
        self.expect_blocks(caches, kv, 3, "B2NHD")

    def test_save_from_device_and_read_back(self):
        lay = self.layout
        caches = self.caches()
        keys = objectcache.chunk_keys(range(70000, 70000 + 16 * 3), lay)
        kv = random_kv(lay, 3, seed=43)
        for layer, cache in enumerate(caches):
            for j in range(3):
                cache.host[:, self.blocks[j]] = kv[j, layer].view(2, 16, lay.kv_heads, lay.head_dim)
        c = self.client()
        save = c.save_from_device(keys, caches, self.blocks[:3], device=self.dev)
        stream = self.dev.new_stream()
        for layer in range(lay.layers):
            save.save_layer(layer, stream)
        with self.assertRaises(ValueError):
            save.save_layer(0, stream)  # given twice
        save.wait()
        c.flush()
        out = torch.zeros(lay.layers, 3, lay.layer_slice_bytes // 4)
        c.retrieve_layerwise(keys, 3, [out[layer] for layer in range(lay.layers)]).wait()
        for j in range(3):
            self.assertTrue(torch.equal(out[:, j], kv[j]))

    def test_every_misuse_gets_a_clear_error(self):
        keys, _ = self.stored_chunks(2, seed=44)
        c = self.client()
        caches = self.caches()

        def fails(exc, text, **kw):
            args = dict(keys=keys, layers=3, caches=caches, block_ids=self.blocks, device=self.dev)
            args.update(kw)
            with self.assertRaises(exc) as e:
                c.retrieve_to_device(**args)
            self.assertIn(text, str(e.exception))

        fails(ValueError, "on the CPU", caches=[torch.zeros(2, 12, 16, 2, 8)] * 3)
        fails(TypeError, "dtype", caches=[CudaStandIn(x.host.view(torch.int32)) for x in caches])
        fails(ValueError, "must name each", order="2BNHH")
        fails(ValueError, "dimensions", order="BNC")
        wide = CudaStandIn.empty(self.dev, (2, self.BLOCKS, 16, 2, 16), torch.float32)
        fails(ValueError, "not contiguous", caches=[CudaStandIn(wide.host[..., ::2])] * 3)
        fails(ValueError, "outside the cache", block_ids=[0, 12])
        fails(ValueError, "block -1 is outside the cache's 12 blocks", block_ids=[-1])
        fails(ValueError, f"block {2 ** 64} is outside the cache", block_ids=[2 ** 64])
        fails(TypeError, "block must be an integer, not str", block_ids=["1"])
        fails(ValueError, "first_token -1 is outside 0..2**64-1", first_token=-1)
        fails(ValueError, f"first_token {2 ** 64} is outside", first_token=2 ** 64)
        fails(ValueError, f"do not hold 2 chunks from token {2 ** 64 - 1}", first_token=2 ** 64 - 1)
        fails(ValueError, f"staging_layers {2 ** 32} is outside 1..4294967295",
              staging_layers=2 ** 32)
        fails(ValueError, "staging needs at least one layer", staging_layers=0)
        fails(TypeError, "staging_layers must be an integer, not str", staging_layers="4")
        fails(ValueError, "named twice", block_ids=[1, 1])
        fails(ValueError, "expected 3 layer tensors", caches=caches[:2])
        fails(ValueError, "do not hold", block_ids=[3])
        fails(ValueError, "layerwise mode", mode="S3Agg-CW")
        grad = [CudaStandIn(x.host) for x in caches]
        grad[1].requires_grad = True
        fails(ValueError, "requires grad", caches=grad)
        fails(ValueError, "differs from layer tensor 0", caches=[caches[0], caches[1],
                                                               CudaStandIn(caches[2].host[:, :6])])
        with self.assertRaises(ValueError) as e:
            c.retrieve_layerwise(keys, 3, caches)
        self.assertIn("retrieve_to_device", str(e.exception))
        with self.assertRaises(ValueError):
            objectcache.Device("tpu")
        for cache in caches:
            self.assertEqual(int(cache.host.abs().sum()), 0)  # nothing was written

    def test_without_a_gpu_the_tensors_device_is_unavailable(self):
        if os.path.exists("/dev/nvidiactl"):
            self.skipTest("a GPU is here")
        keys, _ = self.stored_chunks(1, seed=45)
        with self.assertRaises(objectcache.Error) as e:
            self.client().retrieve_to_device(keys, 3, self.caches(), self.blocks)
        self.assertEqual(e.exception.code, "Unavailable")


def make_engine(endpoint, step=None, mode="S3Agg-LW", blocks=64, bucket="engine", **model_kw):
    cfg = engine.ModelConfig(**{**CONFIG, **model_kw})
    model = engine.ReferenceModel(cfg)
    conn = None
    if endpoint is not None:
        conn = connector.ConnectorConfig([endpoint], bucket, engine.layout_for(cfg),
                                         access_key=base.ACCESS, secret_key=base.SECRET,
                                         mode=mode, timeout=5)
    return engine.Engine(model, blocks, conn, step=step)


class EngineTest(base.ServerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="engine")
        g = torch.Generator().manual_seed(11)
        cls.prompt = torch.randint(0, CONFIG["vocab_size"], (96,), generator=g).tolist()
        cls.recompute = {step: make_engine(None, step) for step in (None, 16)}

    def reference(self, tokens, step):
        return self.recompute[step].prefill(engine.Request("ref", tokens)).logits

    def check(self, result, tokens, step):
        ref = self.reference(tokens, step)
        if step is not None:  # the same operation order: the same bits
            self.assertTrue(torch.equal(result.logits, ref))
        else:  # stated tolerance, and the same next token
            self.assertTrue(torch.allclose(result.logits, ref, rtol=1e-4, atol=1e-4),
                            (result.logits - ref).abs().max())
            self.assertEqual(result.logits.argmax().item(), ref.argmax().item())

    def test_restored_prefix_gives_recompute_logits(self):
        p = self.prompt
        variants = {
            "none": [p[0] + 1] + p[1:80],          # shares 0 tokens
            "part": p[:20] + [1, 2, 3] * 10,       # 20 tokens: one chunk and a part
            "chunks": p[:48] + [5] * 17,           # exactly 3 chunks
            "whole": p[:80],                       # the whole cached prompt
        }
        expect = {"none": 0, "part": 16, "chunks": 48, "whole": 64}
        for step in (16, None):
            for mode in MODES:
                bucket = f"eng-{step or 'b'}-{mode.lower()}"
                self.s3.create_bucket(Bucket=bucket)
                e = make_engine(self.server.endpoint, step, mode, bucket=bucket)
                first = e.prefill(engine.Request("r0", p[:80]))
                self.assertEqual(first.cached_tokens, 0)
                self.check(first, p[:80], step)
                e.worker.flush()
                for name, tokens in variants.items():
                    r = e.prefill(engine.Request(name, tokens))
                    self.assertEqual(r.cached_tokens, expect[name], (step, mode, name))
                    self.assertEqual(r.attempts, 1)
                    self.check(r, tokens, step)
                e.close()

    def store_prompt(self, bucket, step=16):
        self.s3.create_bucket(Bucket=bucket)
        e = make_engine(self.server.endpoint, step, bucket=bucket)
        e.prefill(engine.Request("seed", self.prompt))
        e.worker.flush()
        keys = e.worker.keys_for(engine.Request("x", self.prompt))
        return e, keys

    def object_file(self, bucket, key):
        for root, _, files in os.walk(self.server.store):
            for f in files:
                if key.hex() in f and bucket in os.path.join(root, f):
                    return os.path.join(root, f)
        raise AssertionError(f"no file for {key.hex()}")

    def test_damaged_chunk_is_recomputed_from_there(self):
        e, keys = self.store_prompt("damaged")
        path = self.object_file("damaged", keys[2])
        with open(path, "r+b") as f:  # one bit of layer 1's slice
            f.seek(4096 + 1 * e.worker.config.layout.layer_slice_bytes + 100)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x10]))
        r = e.prefill(engine.Request("after-damage", self.prompt))
        self.assertEqual(r.cached_tokens, 32)  # chunks 0 and 1; from chunk 2 on, recomputed
        self.assertEqual(r.attempts, 2)
        self.check(r, self.prompt, 16)
        e.close()

    def test_missing_chunk_in_the_middle(self):
        e, keys = self.store_prompt("missing")
        self.s3.delete_object(Bucket="missing", Key=keys[3].hex())
        r = e.prefill(engine.Request("m1", self.prompt))
        self.assertEqual(r.cached_tokens, 48)
        self.check(r, self.prompt, 16)
        # Gone between the scheduler's lookup and the worker's retrieval.
        e.worker.flush()
        start = e.worker.start_load_kv

        def delete_then_load(ctx):
            self.s3.delete_object(Bucket="missing", Key=keys[1].hex())
            start(ctx)
        e.worker.start_load_kv = delete_then_load
        r = e.prefill(engine.Request("m2", self.prompt))
        self.assertEqual((r.cached_tokens, r.attempts), (16, 2))
        self.check(r, self.prompt, 16)
        e.close()

    def test_server_killed_mid_retrieval(self):
        tmp = tempfile.TemporaryDirectory()
        server = base.Server(tmp.name)
        try:
            base.client(server.endpoint).create_bucket(Bucket="engine")
            e = make_engine(server.endpoint, 16)
            e.prefill(engine.Request("seed", self.prompt))
            e.worker.flush()
            start = e.worker.start_load_kv

            def kill_then_load(ctx):
                server.proc.kill()
                server.proc.wait()
                start(ctx)
            e.worker.start_load_kv = kill_then_load
            r = e.prefill(engine.Request("k", self.prompt))
            self.assertEqual(r.cached_tokens, 0)
            self.assertEqual(r.attempts, 2)
            self.check(r, self.prompt, 16)
            e.close()
        finally:
            server.stop()
            tmp.cleanup()

    def test_layout_mismatch_is_never_used(self):
        # Objects of another layout stored under this model's keys: never a hit.
        e, keys = self.store_prompt("mismatch-src")
        self.s3.create_bucket(Bucket="mismatch")
        cfg = engine.ModelConfig(**CONFIG)
        other = objectcache.Layout(cfg.layers, 1, cfg.head_dim * 2, "fp32", 16, cfg.name)
        for k in keys:
            kv = torch.randn(other.chunk_kv_bytes // 4)
            self.s3.put_object(Bucket="mismatch", Key=k.hex(),
                               Body=objectcache.encode_chunk(other, k, kv))
        m = make_engine(self.server.endpoint, 16, bucket="mismatch")
        r = m.prefill(engine.Request("mm", self.prompt))
        self.assertEqual(r.cached_tokens, 0)
        self.check(r, self.prompt, 16)
        e.close()
        m.close()

    def test_two_processes_share_one_server(self):
        self.s3.create_bucket(Bucket="shared")
        script = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {PYTHON_DIR!r}); sys.path.insert(0, {os.path.dirname(__file__)!r})
            import python_test as t
            t.load({PYTHON_DIR!r})
            e = t.make_engine({self.server.endpoint!r}, 16, bucket="shared")
            r = e.prefill(t.engine.Request("writer", {self.prompt!r}))
            assert r.cached_tokens == 0
            e.worker.flush()
            assert e.worker.client.stats()["stored"] == 6, e.worker.client.stats()
        """)
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        e = make_engine(self.server.endpoint, 16, bucket="shared")
        r = e.prefill(engine.Request("reader", self.prompt + [3, 4]))
        self.assertEqual(r.cached_tokens, 96)
        self.check(r, self.prompt + [3, 4], 16)
        e.close()


def fake_vllm_base():
    """Stands in for vLLM's KV connector v1 base module (vLLM cannot be installed here): the
    adapter's translation is what is under test, not vLLM."""
    import abc
    import enum
    import types
    name = "vllm.distributed.kv_transfer.kv_connector.v1.base"
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    mod = sys.modules[name]
    if hasattr(mod, "KVConnectorBase_V1"):  # made once: the adapter imported these classes
        return mod

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        # As vLLM's base.py has it today: kv_cache_config is required.
        def __init__(self, vllm_config, role, kv_cache_config):
            self._connector_metadata = None
            self._kv_cache_config = kv_cache_config

        def bind_connector_metadata(self, meta):
            self._connector_metadata = meta

        def clear_connector_metadata(self):
            self._connector_metadata = None

    class SupportsHMA(abc.ABC):
        @abc.abstractmethod
        def request_finished_all_groups(self, request, block_ids): ...

    mod.KVConnectorRole, mod.KVConnectorMetadata = KVConnectorRole, KVConnectorMetadata
    mod.KVConnectorBase_V1, mod.SupportsHMA = KVConnectorBase_V1, SupportsHMA
    return mod


class VllmEngine:
    """The reference model as vLLM runs it with our adapter (over the stand-in base): the
    scheduler side's match and metadata, the worker's hooks in every attention layer,
    start_load_kv before the forward only for a synchronous load, and vLLM's "recompute"
    failure policy: blocks reported by get_block_ids_with_load_errors are computed again from
    the first of them, and the step that read them is discarded."""

    class _AttentionHooks:
        """What vLLM's attention layers call (the engine's forward calls them by these names)."""

        def __init__(self, worker):
            self.worker = worker

        def wait_for_layer_load(self, name):
            self.worker.wait_for_layer_load(name)

        def has_load_error(self, request_id):
            return False  # vLLM runs the whole step; load errors are read after it

        def save_kv_layer(self, name, layer, attn_metadata):
            self.worker.save_kv_layer(name, layer, attn_metadata)

    def __init__(self, test, bucket):
        _, self.sched, self.worker = test.vllm_pair(bucket)
        self.engine = make_engine(None, step=16)
        self.engine.cache.allocate(1)  # block 0 is vLLM's null block: never a request's
        self.worker.register_kv_caches(dict(zip(self.engine.layer_names,
                                                self.engine.cache.layers)))

    def prefill(self, tokens):
        """The last token's logits, the prompt tokens loaded, the steps taken."""
        from types import SimpleNamespace as NS
        req = NS(request_id=f"r{id(tokens)}", prompt_token_ids=tokens, lora_request=None,
                 cache_salt=None)
        cache = self.engine.cache
        matched, _ = self.sched.get_num_new_matched_tokens(req, 0)
        self.sched.update_state_after_alloc(req, None, matched)
        blocks = cache.allocate(len(tokens))
        out = NS(scheduled_new_reqs=[NS(req_id=req.request_id, block_ids=(blocks,))],
                 scheduled_cached_reqs=None,
                 num_scheduled_tokens={req.request_id: len(tokens) - matched},
                 has_sync_kv_loads=False)
        self.worker.bind_connector_metadata(self.sched.build_connector_meta(out))
        if out.has_sync_kv_loads:
            self.worker.start_load_kv(None)
        self.engine.worker = self._AttentionHooks(self.worker)
        logits, _ = self.engine._forward(req, tokens, blocks, matched)
        if not out.has_sync_kv_loads:
            self.worker.start_load_kv(None)
        self.worker.wait_for_save()
        self.worker.clear_connector_metadata()
        self.engine.worker = None
        bad = self.worker.get_block_ids_with_load_errors()
        steps = 1
        if bad:  # recompute from the first block that did not load; this step is discarded
            matched = min(blocks.index(b) for b in bad) * cache.block_size
            logits, _ = self.engine._forward(req, tokens, blocks, matched)
            steps = 2
        self.sched.request_finished(req, blocks)
        cache.release(blocks)
        self.worker.impl.flush()
        return logits, matched, steps


class ConnectorTest(base.ServerCase):
    """The connector's calls as vLLM makes them: a prefix partly in the engine's own cache, a
    prompt computed over several steps, and the vLLM adapter's translation."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        g = torch.Generator().manual_seed(5)
        cls.prompt = torch.randint(0, CONFIG["vocab_size"], (96,), generator=g).tolist()

    def test_local_prefix_and_chunked_prefill(self):
        self.s3.create_bucket(Bucket="conn")
        seed = make_engine(self.server.endpoint, 16, bucket="conn")
        seed.prefill(engine.Request("seed", self.prompt[:80]))  # chunks 0..4 in ObjectCache
        seed.worker.flush()
        conf = seed.worker.config
        sched = connector.ObjectCacheConnector(conf, connector.Role.SCHEDULER)
        req = engine.Request("a", self.prompt)
        # The engine has chunk 0 itself; ObjectCache supplies 1..4; chunk 5 is computed.
        self.assertEqual(sched.get_num_new_matched_tokens(req, 16), (64, False))
        sched.update_state_after_alloc(req, None, 64)
        blocks = [7, 3, 9, 1, 4, 8]
        meta = sched.build_connector_meta(connector.SchedulerOutput(
            [connector.NewRequest(req, blocks)], {"a": 8}))  # this step: tokens 80..87
        (r,) = meta.requests
        keys = sched.keys_for(req)
        self.assertEqual((r.first_chunk, r.load_keys, r.load_blocks), (1, keys[1:5], blocks[1:5]))
        self.assertEqual(r.save_keys, [])  # chunk 5 is not complete after this step
        sched.update_state_after_alloc(req, None, 64)
        meta_whole = sched.build_connector_meta(connector.SchedulerOutput(
            [connector.NewRequest(req, blocks)], {"a": 16}))
        self.assertEqual(meta_whole.requests[0].save_keys, keys[5:6])

        cache = engine.PagedKvCache(engine.ModelConfig(**CONFIG), 12, 16)
        worker = connector.ObjectCacheConnector(conf, connector.Role.WORKER)
        names = [f"l{i}" for i in range(CONFIG["layers"])]
        worker.register_kv_caches(dict(zip(names, cache.layers)))
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        expect = [torch.empty(4, *cache.layers[0].shape[1:]) for _ in names]
        seed.worker.client.retrieve_layerwise(keys[1:5], len(names), expect).wait()
        for i, name in enumerate(names):
            worker.wait_for_layer_load(name)
            self.assertTrue(torch.equal(cache.layers[i][blocks[1:5]], expect[i]))
            self.assertEqual(cache.layers[i][blocks[0]].abs().sum().item(), 0)  # untouched
        self.assertEqual(worker.get_block_ids_with_load_errors(), set())
        for c in (seed, sched, worker):
            c.close()

    def vllm_config(self, bucket, latent=False, **extra):
        from types import SimpleNamespace as NS
        c = CONFIG
        head_dim = c["hidden"] // c["heads"]
        kv_heads, width = (1, 2 * head_dim) if latent else (c["kv_heads"], head_dim)
        spec = NS(block_size=16, num_kv_heads=kv_heads, head_size=width, dtype=torch.float32)
        kv_cache_config = NS(num_blocks=24, kv_cache_groups=[NS(
            layer_names=[f"model.layers.{i}.self_attn.attn" for i in range(c["layers"])],
            kv_cache_spec=spec)])
        config = NS(
            kv_transfer_config=NS(kv_connector_extra_config={
                "endpoints": [self.server.endpoint], "bucket": bucket,
                "access_key": base.ACCESS, "secret_key": base.SECRET, **extra}),
            model_config=NS(model="tiny-llama", dtype=torch.float32, use_mla=latent,
                            get_num_layers=lambda p: c["layers"],
                            get_num_kv_heads=lambda p: kv_heads,
                            get_head_size=lambda: width),
            parallel_config=NS(tensor_parallel_size=2, rank=1),
            cache_config=NS(cache_dtype="auto", block_size=16))
        return config, kv_cache_config

    def vllm_pair(self, bucket, latent=False, rank=0, **extra):
        fake = fake_vllm_base()
        from objectcache import vllm_connector
        self.s3.create_bucket(Bucket=bucket)
        config, kv_cache_config = self.vllm_config(bucket, latent, **extra)
        # vLLM's scheduler side reports rank 0; each worker its own rank.
        config.parallel_config.rank = 0
        sched = vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.SCHEDULER,
                                                        kv_cache_config)
        config.parallel_config.rank = rank
        worker = vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.WORKER,
                                                         kv_cache_config)
        return fake, sched, worker

    def test_vllm_tensor_parallel_ranks_keep_their_own_heads(self):
        # Two ranks of one model save the same prompt, each its own heads; each loads its own.
        from objectcache import vllm_connector
        fake, sched, rank0 = self.vllm_pair("vllm-tp", rank=0)
        config, kv_cache_config = self.vllm_config("vllm-tp")
        config.parallel_config.rank = 1
        rank1 = vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.WORKER,
                                                        kv_cache_config)
        c = CONFIG
        g = torch.Generator().manual_seed(21)
        caches = [{f"model.layers.{i}.self_attn.attn": torch.randn(
            24, 2, 16, c["kv_heads"], c["hidden"] // c["heads"], generator=g)
            for i in range(c["layers"])} for _ in range(2)]
        workers = [rank0, rank1]
        for w, cache in zip(workers, caches):
            w.register_kv_caches(cache)

        def step(req_id, blocks, scheduled):
            out, meta = self.vllm_schedule(sched, [(req_id, blocks)], scheduled=scheduled)
            for w, cache in zip(workers, caches):
                self.vllm_worker_step(w, cache, out, meta)

        a, _ = self.vllm_request(sched, "a", self.prompt)
        step("a", list(range(1, 7)), {"a": len(self.prompt)})  # block 0: vLLM's null block
        sched.request_finished(a, [])
        for w in workers:
            w.impl.flush()
        b, matched = self.vllm_request(sched, "b", self.prompt)
        self.assertEqual(matched, 80)
        step("b", list(range(10, 16)), {"b": 16})
        for w, cache in zip(workers, caches):
            self.assertEqual(w.get_block_ids_with_load_errors(), set())
            for layer in cache.values():
                self.assertTrue(torch.equal(layer[10:15], layer[1:6]))
        self.assertFalse(torch.equal(caches[0]["model.layers.0.self_attn.attn"][10:15],
                                     caches[1]["model.layers.0.self_attn.attn"][10:15]))
        for w in workers:
            w.shutdown()

    def vllm_step(self, sched, worker, caches, new=(), cached=None, scheduled=None):
        """One engine step as vLLM's current source runs it: the metadata, then start_load_kv
        before the forward only when a load is synchronous, else after it (#53333); the hooks
        in every attention layer; wait_for_save."""
        out, meta = self.vllm_schedule(sched, new, cached, scheduled)
        self.vllm_worker_step(worker, caches, out, meta)
        return out

    def vllm_schedule(self, sched, new=(), cached=None, scheduled=None):
        """The scheduler's half of a step: its output (`new` is (request id, blocks) pairs,
        blocks a list for one KV cache group or a tuple of lists, one a group) and metadata."""
        from types import SimpleNamespace as NS
        out = NS(scheduled_new_reqs=[
                     NS(req_id=rid, block_ids=blocks if isinstance(blocks, tuple) else (blocks,))
                     for rid, blocks in new],
                 scheduled_cached_reqs=cached, num_scheduled_tokens=scheduled,
                 has_sync_kv_loads=False)
        return out, sched.build_connector_meta(out)

    def vllm_worker_step(self, worker, caches, out, meta):
        """A worker's half of a step (vllm_step's order)."""
        worker.bind_connector_metadata(meta)
        if out.has_sync_kv_loads:
            worker.start_load_kv(None)
        for name, cache in caches.items():
            worker.wait_for_layer_load(name)
            worker.save_kv_layer(name, cache, None)
        if not out.has_sync_kv_loads:
            worker.start_load_kv(None)
        worker.wait_for_save()
        worker.clear_connector_metadata()

    def vllm_request(self, sched, rid, prompt):
        from types import SimpleNamespace as NS
        req = NS(request_id=rid, prompt_token_ids=prompt, lora_request=None, cache_salt=None)
        matched, asynchronous = sched.get_num_new_matched_tokens(req, 0)
        self.assertFalse(asynchronous)
        # Asked again (vLLM may), the answer is the same and no second lookup is made.
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (matched, False))
        sched.update_state_after_alloc(req, None, matched)
        return req, matched

    def test_vllm_adapter_follows_the_current_contract(self):
        fake, sched, worker = self.vllm_pair("vllm")
        c = CONFIG
        head_dim = c["hidden"] // c["heads"]
        layout = worker.impl.config.layout
        self.assertEqual((layout.name, layout.layers, layout.kv_heads, layout.head_dim,
                          layout.dtype), ("tiny-llama/tp2.0", c["layers"], c["kv_heads"],
                                          head_dim, "fp32"))
        cls = type(worker)
        self.assertIsNone(cls.get_required_kvcache_layout(None))
        self.assertTrue(cls.requires_piecewise_for_cudagraph({}))
        self.assertFalse(worker.requires_kv_delivery)
        g = torch.Generator().manual_seed(8)
        caches = {f"model.layers.{i}.self_attn.attn": torch.randn(
            24, 2, 16, c["kv_heads"], head_dim, generator=g) for i in range(c["layers"])}
        with self.assertRaisesRegex(ValueError, "num_blocks, 2, block_size"):
            worker.register_kv_caches({f"model.layers.{i}.a": torch.empty(
                2, 24, 16, c["kv_heads"], head_dim) for i in range(c["layers"])})
        # A draft model's layer beyond the layout is not served, and its hooks do nothing.
        worker.register_kv_caches({**caches, "model.layers.99.self_attn.attn": torch.empty(0)})
        worker.wait_for_layer_load("model.layers.99.self_attn.attn")

        # Request a: a cold prompt over two steps (chunked prefill); in neither step is a load
        # synchronous, so start_load_kv comes after the forward, and both steps' chunks are saved.
        from types import SimpleNamespace as NS
        a, matched = self.vllm_request(sched, "a", self.prompt)
        self.assertEqual(matched, 0)
        self.vllm_step(sched, worker, caches, new=[("a", [1, 2, 3])], scheduled={"a": 48})
        self.vllm_step(sched, worker, caches, scheduled={"a": 48}, cached=NS(
            req_ids=["a"], new_block_ids=[([4, 5, 6],)], num_computed_tokens=[48],
            resumed_req_ids=set()))
        sched.request_finished(a, list(range(1, 7)))
        self.assertEqual(sched.impl._sched, {})  # nothing kept for a finished request
        worker.impl.flush()
        self.assertEqual(worker.impl.client.stats()["stored"], 6)

        # Request b: the same prompt into other blocks: 5 chunks load (the last token is
        # computed), in a step whose load is synchronous.
        b, matched = self.vllm_request(sched, "b", self.prompt)
        self.assertEqual(matched, 80)
        out = self.vllm_step(sched, worker, caches, new=[("b", list(range(10, 16)))],
                             scheduled={"b": 16})
        self.assertTrue(out.has_sync_kv_loads)
        for cache in caches.values():
            self.assertTrue(torch.equal(cache[10:15], cache[1:6]))
        # Preempted and resumed into yet other blocks: its prefix loads again.
        sched.update_state_after_alloc(b, None, 80)
        self.vllm_step(sched, worker, caches, scheduled={"b": 16}, cached=NS(
            req_ids=["b"], new_block_ids=[([17, 18, 19, 20, 21, 22],)], num_computed_tokens=[0],
            resumed_req_ids={"b"}))
        for cache in caches.values():
            self.assertTrue(torch.equal(cache[17:22], cache[1:6]))
        self.assertEqual(worker.get_block_ids_with_load_errors(), set())
        sched.request_finished(b, [])
        # The same tokens behind an image, or a prompt of embeddings: nothing is shared.
        image = NS(request_id="c", prompt_token_ids=self.prompt, lora_request=None,
                   cache_salt=None, mm_features=[NS(identifier="img-1")])
        self.assertEqual(sched.get_num_new_matched_tokens(image, 0), (0, False))
        embeds = NS(request_id="d", prompt_token_ids=None, lora_request=None, cache_salt=None)
        self.assertEqual(sched.get_num_new_matched_tokens(embeds, 0), (0, False))
        worker.shutdown()

    def test_the_reference_model_through_the_vllm_adapter_gives_the_recompute_logits(self):
        recompute = make_engine(None, step=16)
        e = VllmEngine(self, "vllm-model")

        def check(tokens, cached, steps):
            logits, got, taken = e.prefill(tokens)
            self.assertEqual((got, taken), (cached, steps))
            # The same operation order as the recompute's: the same bits.
            self.assertTrue(torch.equal(logits, recompute.prefill(engine.Request("r", tokens))
                                        .logits))
        check(self.prompt, 0, 1)
        check(self.prompt[:48] + [9] * 20, 48, 1)
        # A damaged chunk: its layer ends the retrieval for every chunk, so vLLM gets every
        # block of the load as a load error and recomputes the prompt, never reading a block
        # that misses a layer (the engine-neutral Engine fetches chunks 0 and 1 again instead:
        # EngineTest.test_damaged_chunk_is_recomputed_from_there).
        keys = e.worker.impl.keys_for(engine.Request("k", self.prompt))
        path = EngineTest.object_file(self, "vllm-model", keys[2])
        with open(path, "r+b") as fh:
            fh.seek(4096 + e.worker.impl.config.layout.layer_slice_bytes + 100)
            byte = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([byte[0] ^ 0x10]))
        check(self.prompt, 0, 2)
        e.worker.shutdown()

    def test_vllm_adapter_with_two_kv_cache_groups(self):
        # The hybrid allocator: full-attention layers 0 and 2 in one group, sliding-window layers
        # 1 and 3 in another, each group its own blocks (one pool: ids unique across groups).
        from types import SimpleNamespace as NS
        fake = fake_vllm_base()
        from objectcache import vllm_connector
        self.s3.create_bucket(Bucket="vllm-hma")
        config, kv_cache_config = self.vllm_config("vllm-hma")
        config.parallel_config.rank = 0
        spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
        names = [f"model.layers.{i}.self_attn.attn" for i in range(CONFIG["layers"])]
        kv_cache_config.kv_cache_groups = [NS(layer_names=names[0::2], kv_cache_spec=spec),
                                           NS(layer_names=names[1::2], kv_cache_spec=spec)]
        sched = vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.SCHEDULER,
                                                        kv_cache_config)
        worker = vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.WORKER,
                                                         kv_cache_config)
        self.assertIsInstance(worker, fake.SupportsHMA)
        g = torch.Generator().manual_seed(31)
        caches = {n: torch.randn(32, 2, 16, CONFIG["kv_heads"], CONFIG["hidden"] // CONFIG["heads"],
                                 generator=g) for n in names}
        worker.register_kv_caches(caches)
        before = {n: c.clone() for n, c in caches.items()}

        def step(rid, full, window, scheduled):
            self.vllm_step(sched, worker, caches, new=[(rid, (full, window))],
                           scheduled={rid: scheduled})

        a, _ = self.vllm_request(sched, "a", self.prompt)
        step("a", [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], len(self.prompt))
        self.assertEqual(sched.request_finished_all_groups(a, ([1], [7])), (False, None))
        worker.impl.flush()
        self.assertEqual(sum(w.client.stats()["stored"] for w in worker.impl.groups), 12)
        # b: the same prompt. Its sliding-window group holds only chunks 2.. (vLLM's null block 0
        # before them): those load, the null block is never written.
        b, matched = self.vllm_request(sched, "b", self.prompt)
        self.assertEqual(matched, 80)
        step("b", [13, 14, 15, 16, 17, 18], [0, 0, 20, 21, 22, 23], 16)
        self.assertEqual(worker.get_block_ids_with_load_errors(), set())
        for i, name in enumerate(names):
            c = caches[name]
            if i % 2 == 0:
                self.assertTrue(torch.equal(c[13:18], c[1:6]), name)
            else:
                self.assertTrue(torch.equal(c[20:23], c[9:12]), name)
            self.assertTrue(torch.equal(c[0], before[name][0]), name)
        sched.request_finished_all_groups(b, ())
        # A chunk one group no longer has: the prefix is matched only as far as every group
        # has it.
        window_keys = sched.impl.groups[1].keys_for(b)
        self.s3.delete_object(Bucket="vllm-hma", Key=window_keys[3].hex())
        c_req, matched = self.vllm_request(sched, "c", self.prompt)
        self.assertEqual(matched, 48)
        worker.shutdown()
        # A group that is not attention KV (a Mamba state): refused at start, saying so.
        kv_cache_config.kv_cache_groups[1] = NS(layer_names=names[1::2],
                                                kv_cache_spec=NS(block_size=16, shapes=()))
        with self.assertRaisesRegex(ValueError, "attention KV"):
            vllm_connector.ObjectCacheVllmConnector(config, fake.KVConnectorRole.WORKER,
                                                    kv_cache_config)

    def test_vllm_adapter_on_cuda_caches_in_every_layout(self):
        # CUDA tensors standing on the emulated device (real ones on the GPU that
        # OBJECTCACHE_TEST_DEVICE names: scripts/gpu-check), in each layout vLLM allocates;
        # request a saves, request b loads its prefix into other blocks, no other block touched.
        gpu = os.environ.get("OBJECTCACHE_TEST_DEVICE", "")
        gpu = torch.device(gpu) if gpu.startswith("cuda") else None
        c = CONFIG
        head_dim = c["hidden"] // c["heads"]
        h, blocks = c["kv_heads"], 24
        layouts = {  # name: (latent, memory shape, view of it as vLLM's logical layer shape)
            "flash_attn": (False, (2, blocks, 16, h, head_dim), lambda t: t),
            "flashinfer": (False, (blocks, 2, 16, h, head_dim), lambda t: t),
            "flashinfer_hnd": (False, (blocks, 2, h, 16, head_dim), lambda t: t.transpose(2, 3)),
            "packed_nhd": (False, (blocks, 16, h, 2 * head_dim), lambda t: t.transpose(1, 2)),
            "mla": (True, (blocks, 16, 2 * head_dim), lambda t: t),
            "mla_4d": (True, (blocks, 1, 16, 2 * head_dim), lambda t: t),
        }
        for name, (latent, shape, view) in layouts.items():
            dev = None if gpu else objectcache.Device("emulated", copy_delay_ms=0.2)
            fake, sched, worker = self.vllm_pair("vllm-" + name.replace("_", "-"), latent,
                                                 device=dev, staging_layers=2)
            g = torch.Generator().manual_seed(3)
            if gpu:
                memory = [torch.randn(*shape, generator=g).to(gpu) for _ in range(c["layers"])]
                caches = {f"model.layers.{i}.self_attn.attn": view(m)
                          for i, m in enumerate(memory)}
                host = lambda m: m.cpu()  # noqa: E731: waits for the device's work
            else:
                memory = [CudaStandIn.empty(dev, shape, torch.float32)
                          for _ in range(c["layers"])]
                caches = {f"model.layers.{i}.self_attn.attn": CudaStandIn(view(m.host))
                          for i, m in enumerate(memory)}
                for m in memory:
                    m.host.copy_(torch.randn(*shape, generator=g))
                host = lambda m: m.host  # noqa: E731
            worker.register_kv_caches(caches)
            before = [host(m).clone() for m in memory]
            a, _ = self.vllm_request(sched, "a", self.prompt)
            self.vllm_step(sched, worker, caches, new=[("a", [5, 6, 7, 8, 9, 10])],
                           scheduled={"a": len(self.prompt)})
            sched.request_finished(a, [])
            worker.impl.flush()
            b, matched = self.vllm_request(sched, "b", self.prompt)
            self.assertEqual(matched, 80, name)
            self.vllm_step(sched, worker, caches, new=[("b", [20, 1, 14, 3, 22, 23])],
                           scheduled={"b": 16})
            self.assertEqual(worker.get_block_ids_with_load_errors(), set(), name)
            for i, m in enumerate(memory):
                t = view(host(m))
                block = (lambda t, k: t[:, k]) if name == "flash_attn" else (lambda t, k: t[k])
                for src, dst in zip([5, 6, 7, 8, 9], [20, 1, 14, 3, 22]):
                    self.assertTrue(torch.equal(block(t, dst), block(t, src)), (name, i, dst))
                changed = {20, 1, 14, 3, 22}
                orig = view(before[i])
                for k in range(blocks):
                    if k not in changed:
                        self.assertTrue(torch.equal(block(t, k), block(orig, k)), (name, i, k))
            worker.shutdown()


def fake_sglang_storage_base():
    """Stands in for SGLang's HiCache storage module (SGLang cannot be installed here): the
    abstract base its factory checks backends against, and the config it builds them with."""
    import abc
    import dataclasses
    name = "sglang.srt.mem_cache.hicache_storage"
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    mod = sys.modules[name]

    @dataclasses.dataclass
    class HiCacheStorageConfig:
        tp_rank: int
        tp_size: int
        pp_rank: int
        pp_size: int
        attn_cp_rank: int
        attn_cp_size: int
        is_mla_model: bool
        enable_storage_metrics: bool
        is_page_first_layout: bool
        model_name: str | None
        dp_rank: int = 0
        dp_size: int = 1
        tp_lcm_size: int | None = None
        should_split_heads: bool = False
        extra_config: dict | None = None

    class HiCacheStorage(abc.ABC):
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        @abc.abstractmethod
        def get(self, key, target_location=None, target_sizes=None): ...

        @abc.abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None): ...

        @abc.abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None): ...

        @abc.abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...

        @abc.abstractmethod
        def exists(self, key): ...

    mod.HiCacheStorage, mod.HiCacheStorageConfig = HiCacheStorage, HiCacheStorageConfig
    return mod


class HostPool:
    """An SGLang host KV pool as a storage backend sees one: `kv_buffer` in one of SGLang's memory
    layouts (MHA: layer_first (2, L, T, H, D), page_first (2, T, L, H, D), page_first_direct
    (2, Pn, L, P, H, D), page_head (2, Pn, H, P, L, D); MLA: (L, T, 1, C), (T, L, 1, C),
    (Pn, L, P, 1, C)); pages are flat copies (get_data_page) and are written back from flat
    tensors (set_from_flat_data_page), as SGLang's pools make and take them."""

    MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
    MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")

    def __init__(self, tokens, layers=3, page_size=4, heads=2, head_dim=8, width=None,
                 dtype=None, seed=None, layout="page_first"):
        self.layer_num, self.page_size, self.layout = layers, page_size, layout
        self.dtype = dtype or torch.bfloat16
        self.head_num, self.head_dim = heads, head_dim
        self.mla = width is not None
        L, T, P, Pn = layers, tokens, page_size, tokens // page_size
        if self.mla:
            shape = {"layer_first": (L, T, 1, width), "page_first": (T, L, 1, width),
                     "page_first_direct": (Pn, L, P, 1, width)}[layout]
        else:
            H, D = heads, head_dim
            shape = {"layer_first": (2, L, T, H, D), "page_first": (2, T, L, H, D),
                     "page_first_direct": (2, Pn, L, P, H, D),
                     "page_head": (2, Pn, H, P, L, D)}[layout]
        self.kv_buffer = torch.zeros(*shape, dtype=self.dtype)
        if seed is not None:
            self.kv_buffer.copy_(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)))

    def _page(self, index):
        """The page whose first token slot is `index`, as SGLang's get_data_page slices it."""
        kv, p = self.kv_buffer, index // self.page_size
        slots = slice(index, index + self.page_size)
        if self.layout == "layer_first":
            return kv[:, slots] if self.mla else kv[:, :, slots]
        if self.layout == "page_first":
            return kv[slots] if self.mla else kv[:, slots]
        return kv[p] if self.mla else kv[:, p]

    def token(self, slot):
        """Token `slot`'s KV in every layer, whatever the layout: [L, 2, H, D] (MLA [L, 1, C])."""
        kv, p, off = self.kv_buffer, slot // self.page_size, slot % self.page_size
        if self.mla:
            return {"layer_first": lambda: kv[:, slot], "page_first": lambda: kv[slot],
                    "page_first_direct": lambda: kv[p, :, off]}[self.layout]()
        return {"layer_first": lambda: kv[:, :, slot].transpose(0, 1),
                "page_first": lambda: kv[:, slot].transpose(0, 1),
                "page_first_direct": lambda: kv[:, p, :, off].transpose(0, 1),
                "page_head": lambda: kv[:, p, :, off].permute(2, 0, 1, 3)}[self.layout]()

    def get_data_page(self, index, flat=True):
        return self._page(index).flatten() if flat else self._page(index)

    def get_dummy_flat_data_page(self):
        return torch.zeros(self._page(0).numel(), dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        self._page(index).copy_(data_page.reshape(self._page(index).shape))


class SglangEngine:
    """The reference model as SGLang runs it with a HiCache storage backend: a prefill asks the
    backend for the prompt's leading pages (batch_exists, then batch_get_v1 into free pages of
    the host pool), copies them from the host pool to the device cache, computes the rest, then
    backs up the prompt's full pages (device to host pool, then batch_set_v1)."""

    PAGE = 16

    def __init__(self, test, bucket, layout):
        self.engine = make_engine(None, step=self.PAGE)
        c = self.engine.model.config
        self.host = HostPool(32 * self.PAGE, layers=c.layers, page_size=self.PAGE,
                             heads=c.kv_heads, head_dim=c.head_dim, dtype=c.dtype, layout=layout)
        self.backend = test.backend(bucket, self.host, model="reference")
        self.free_pages = list(range(32))  # handed out from the end: pages out of order

    def page_keys(self, tokens):
        """SGLang's page hashes: SHA-256 over the page before's hash and the page's token ids."""
        keys, last = [], None
        for i in range(len(tokens) // self.PAGE):
            h = hashlib.sha256(bytes.fromhex(last) if last else b"")
            for t in tokens[i * self.PAGE:(i + 1) * self.PAGE]:
                h.update(t.to_bytes(4, "little"))
            last = h.hexdigest()
            keys.append(last)
        return keys

    def slots(self, pages):
        return torch.tensor([p * self.PAGE + t for p in pages for t in range(self.PAGE)])

    def prefill(self, tokens):
        """The last token's logits and how many prompt tokens came from storage."""
        cache, keys = self.engine.cache, self.page_keys(tokens)
        # The last token is always computed (its logits are the prefill's result).
        hits = self.backend.batch_exists(keys[:(len(tokens) - 1) // self.PAGE])
        pages = [self.free_pages.pop() for _ in range(hits)]
        loaded = self.backend.batch_get_v1(keys[:hits], self.slots(pages))
        n = loaded.index(False) if False in loaded else len(loaded)
        blocks = cache.allocate(len(tokens))
        for i in range(n):  # host pool to device cache
            for t in range(self.PAGE):
                kv = self.host.token(pages[i] * self.PAGE + t)  # [layers, 2, heads, head_dim]
                for layer, per_layer in enumerate(cache.layers):
                    per_layer[blocks[i], :, t] = kv[layer]
        request = engine.Request("sglang", tokens)
        logits, _ = self.engine._forward(request, tokens, blocks, n * self.PAGE)
        backup = [self.free_pages.pop() for _ in keys]
        for i, page in enumerate(backup):  # device cache to host pool
            for t in range(self.PAGE):
                self.host.token(page * self.PAGE + t).copy_(
                    torch.stack([per_layer[blocks[i], :, t] for per_layer in cache.layers]))
        assert all(self.backend.batch_set_v1(keys, self.slots(backup)))
        self.free_pages += pages + backup
        cache.release(blocks)
        return logits, n * self.PAGE


class SglangTest(base.ServerCase):
    """objectcache.sglang_storage as SGLang's HiCache controller drives it, on its generic page
    path and its zero-copy one (interface_v1): pages backed up from one host pool come back byte
    for byte into another, of any memory layout, and into a paged cache by one retrieval."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.mod = fake_sglang_storage_base()
        from objectcache import sglang_storage
        cls.backend_class = sglang_storage.ObjectCacheStorage

    def backend(self, bucket, pool, tp_rank=0, tp_size=1, mla=False, model="qwen/qwen3-8b"):
        """As SGLang's factory builds a dynamic backend, then registers the host pool."""
        self.assertTrue(issubclass(self.backend_class, self.mod.HiCacheStorage))
        config = self.mod.HiCacheStorageConfig(
            tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
            attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
            is_page_first_layout=True, model_name=model,
            extra_config={"backend_name": "objectcache", "module_path": "objectcache.sglang_storage",
                          "class_name": "ObjectCacheStorage", "endpoints": [self.server.endpoint],
                          "bucket": bucket, "access_key": base.ACCESS,
                          "secret_key": base.SECRET})
        b = self.backend_class(config, {})
        b.register_mem_pool_host(pool)
        return b

    @staticmethod
    def page_keys(pages, seed=""):
        """Chained page hashes, as SGLang makes them (any 64 hex digits would do)."""
        keys, last = [], seed
        for i in range(pages):
            last = hashlib.sha256(f"{last}/{i}".encode()).hexdigest()
            keys.append(last)
        return keys

    def backup(self, b, pool, keys):
        return b.batch_set(keys, [pool.get_data_page(i * pool.page_size) for i in range(len(keys))])

    def restore(self, b, pool, keys):
        dummies = [pool.get_dummy_flat_data_page() for _ in keys]
        pages = b.batch_get(keys, dummies)
        for i, page in enumerate(pages):
            if page is not None:
                pool.set_from_flat_data_page(i * pool.page_size, page)
        return pages

    def test_pages_come_back_byte_for_byte_and_a_prefix_at_most(self):
        self.s3.create_bucket(Bucket="sglang")
        src, dst = HostPool(32, seed=1), HostPool(32)
        b = self.backend("sglang", src)
        keys = self.page_keys(6)
        self.assertEqual(b.batch_exists(keys), 0)
        self.assertTrue(self.backup(b, src, keys[:4]))
        self.assertEqual(b.batch_exists(keys), 4)
        self.assertTrue(b.exists(keys[3]) and not b.exists(keys[4]))
        # Another process's backend over an empty pool: 4 pages, then None.
        other = self.backend("sglang", dst)
        pages = self.restore(other, dst, keys)
        self.assertEqual([p is not None for p in pages], [True] * 4 + [False] * 2)
        self.assertTrue(torch.equal(dst.kv_buffer[:, :16], src.kv_buffer[:, :16]))
        self.assertFalse(dst.kv_buffer[:, 16:].any())
        self.assertTrue(torch.equal(other.get(keys[1]), src.get_data_page(4).view(torch.uint8)))
        # Other ranks and models have keys of their own.
        self.assertEqual(self.backend("sglang", HostPool(32), tp_rank=1, tp_size=2)
                         .batch_exists(keys), 0)
        self.assertEqual(self.backend("sglang", HostPool(32), model="other").batch_exists(keys), 0)
        # Another memory layout reads the same pages: chunks are in the canonical order.
        layer_first = HostPool(32, layout="layer_first")
        self.restore(self.backend("sglang", layer_first), layer_first, keys)
        for slot in range(32):
            self.assertTrue(torch.equal(layer_first.token(slot), src.token(slot) if slot < 16
                                        else torch.zeros_like(src.token(slot))), slot)

    def test_zero_copy_pages_in_every_layout(self):
        # As SGLang's controller calls a backend with interface_v1: pages named by their token
        # slots. Pages 5, 1 and 6 of a pool in each layout go into pages 2, 7 and 0 of a pool in
        # the next layout; every other slot stays as it was.
        for mla, layouts in ((False, HostPool.MHA_LAYOUTS), (True, HostPool.MLA_LAYOUTS)):
            for i, layout in enumerate(layouts):
                other = layouts[(i + 1) % len(layouts)]
                name = f"{'mla' if mla else 'mha'}-{layout}-{other}"
                bucket = "sglang-v1-" + name.replace("_", "-")
                self.s3.create_bucket(Bucket=bucket)
                width = 12 if mla else None
                src = HostPool(32, width=width, seed=7 + i, layout=layout)
                dst = HostPool(32, width=width, layout=other)
                P = src.page_size
                slots = lambda pages: torch.tensor(  # noqa: E731
                    [p * P + t for p in pages for t in range(P)], dtype=torch.int64)
                keys = self.page_keys(4, name)
                saver = self.backend(bucket, src, mla=mla)
                self.assertEqual(saver.batch_set_v1(keys[:3], slots([5, 1, 6])), [True] * 3)
                loader = self.backend(bucket, dst, mla=mla)
                self.assertEqual(loader.batch_get_v1(keys, slots([2, 7, 0, 3])),
                                 [True, True, True, False], name)
                moved = dict(zip([2, 7, 0], [5, 1, 6]))
                for page in range(8):
                    for t in range(P):
                        got = dst.token(page * P + t)
                        want = src.token(moved[page] * P + t) if page in moved \
                            else torch.zeros_like(got)
                        self.assertTrue(torch.equal(got, want), (name, page, t))
                # The generic path reads what the zero-copy one wrote, in its pool's order.
                self.assertTrue(torch.equal(loader.get(keys[1]).view(dst.dtype),
                                            dst.get_data_page(7 * P)), name)

    def test_a_page_is_one_layerwise_retrieval_into_a_paged_cache(self):
        # What an SGLang pool saved is the chunk any engine with the layout reads: one layerwise
        # retrieval puts its pages into blocks of a paged cache [blocks, 2, P, H, D] a layer.
        self.s3.create_bucket(Bucket="sglang-paged")
        src = HostPool(32, seed=11, layout="page_head")
        b = self.backend("sglang-paged", src)
        keys = self.page_keys(3, "paged")
        P = src.page_size
        self.assertEqual(b.batch_set_v1(keys, torch.arange(3 * P) + 2 * P), [True] * 3)
        caches = [torch.zeros(6, 2, P, src.head_num, src.head_dim, dtype=src.dtype)
                  for _ in range(src.layer_num)]
        r = b.client.retrieve_layerwise([b.key(k) for k in keys], src.layer_num, caches,
                                        block_table=[4, 0, 5])
        r.wait()
        for block, page in ((4, 2), (0, 3), (5, 4)):
            for t in range(P):
                token = src.token(page * P + t)  # [L, 2, H, D]
                for layer in range(src.layer_num):
                    self.assertTrue(torch.equal(caches[layer][block, :, t], token[layer]))
        for layer in range(src.layer_num):
            for block in (1, 2, 3):
                self.assertFalse(caches[layer][block].any())

    def test_mla_ranks_share_pages(self):
        self.s3.create_bucket(Bucket="sglang-mla")
        src = HostPool(16, width=12, seed=2)
        keys = self.page_keys(3, "mla")
        self.assertTrue(self.backup(self.backend("sglang-mla", src, 0, 2, mla=True), src, keys))
        dst = HostPool(16, width=12)
        rank1 = self.backend("sglang-mla", dst, 1, 2, mla=True)
        self.assertEqual(rank1.batch_exists(keys), 3)
        self.restore(rank1, dst, keys)
        self.assertTrue(torch.equal(dst.kv_buffer[:12], src.kv_buffer[:12]))

    def damage(self, b, key):
        """Flips one bit of the second layer slice of page `key`'s object on disk."""
        path = None
        for root, _, files in os.walk(self.server.store):
            for f in files:
                if b.key(key).hex() in f:
                    path = os.path.join(root, f)
        stride = -(-b.layout.layer_slice_bytes // 4096) * 4096  # slices start on 4 KiB
        with open(path, "r+b") as f:
            f.seek(4096 + stride + 10)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x01]))

    def test_the_reference_model_through_sglang_gives_the_recompute_logits(self):
        self.s3.create_bucket(Bucket="sglang-model")
        recompute = make_engine(None, step=16)
        g = torch.Generator().manual_seed(21)
        prompt = torch.randint(0, CONFIG["vocab_size"], (80,), generator=g).tolist()

        def check(e, tokens, cached):
            logits, got = e.prefill(tokens)
            self.assertEqual(got, cached)
            # The same operation order as the recompute's: the same bits.
            self.assertTrue(torch.equal(logits, recompute.prefill(engine.Request("r", tokens))
                                        .logits))
        check(SglangEngine(self, "sglang-model", "page_first"), prompt, 0)
        # Another SGLang process with its host pool in another layout: the shared prefix's pages
        # come from storage.
        check(SglangEngine(self, "sglang-model", "page_head"), prompt[:48] + [7] * 20, 48)
        check(SglangEngine(self, "sglang-model", "layer_first"), prompt, 64)
        # A damaged page: the pages before it load, the rest is computed.
        e = SglangEngine(self, "sglang-model", "page_first_direct")
        self.damage(e.backend, e.page_keys(prompt)[1])
        check(e, prompt, 16)

    def test_a_damaged_page_and_those_after_it_are_not_returned(self):
        self.s3.create_bucket(Bucket="sglang-damaged")
        src, dst = HostPool(32, seed=3), HostPool(32)
        b = self.backend("sglang-damaged", src)
        keys = self.page_keys(5, "damaged")
        self.assertTrue(self.backup(b, src, keys))
        self.damage(b, keys[2])
        pages = self.restore(b, dst, keys)
        self.assertEqual([p is not None for p in pages], [True, True, False, False, False])
        self.assertTrue(torch.equal(dst.kv_buffer[:, :8], src.kv_buffer[:, :8]))
        self.assertFalse(dst.kv_buffer[:, 8:].any())

    def test_misuse_gets_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "endpoints"):
            self.backend_class(self.mod.HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True,
                                                             "m", extra_config={"bucket": "b"}))
        b = self.backend("sglang", HostPool(8))
        with self.assertRaisesRegex(ValueError, "bytes"):
            b.batch_set(self.page_keys(1), [torch.zeros(3)])
        with self.assertRaisesRegex(ValueError, "token slots"):
            b.batch_set_v1(self.page_keys(2), torch.arange(5))
        with self.assertRaisesRegex(ValueError, "whole pages"):
            b.batch_set_v1(self.page_keys(1), torch.arange(1, 5))
        mla_page_head = HostPool(8, width=12, layout="page_first")
        mla_page_head.layout = "page_head"  # SGLang has no such MLA pool
        with self.assertRaisesRegex(ValueError, "not supported"):
            self.backend("sglang", mla_page_head, mla=True)
        unregistered = self.backend_class(self.mod.HiCacheStorageConfig(
            0, 1, 0, 1, 0, 1, False, False, True, "m",
            extra_config={"endpoints": [self.server.endpoint], "bucket": "b"}))
        with self.assertRaisesRegex(RuntimeError, "host memory pool"):
            unregistered.batch_get(self.page_keys(1))


def load(python_dir):
    global objectcache, torch, engine, connector, PYTHON_DIR
    PYTHON_DIR = python_dir
    sys.path.insert(0, python_dir)
    import torch as torch_module
    import objectcache as package
    from objectcache import connector as connector_module
    from objectcache import engine as engine_module
    objectcache, torch, engine, connector = package, torch_module, engine_module, connector_module


def main():
    p = argument_parser()
    p.add_argument("--python-dir", required=True)
    args, rest = p.parse_known_args()
    base.OC = args.objectcache
    load(os.path.abspath(args.python_dir))
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
