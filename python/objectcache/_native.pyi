"""Type stubs of objectcache._native (the C++ client bound with pybind11)."""
from typing import Any, Iterable, Sequence, Union

Key = Union[bytes, str]  # 16 bytes, or 32 hex digits
Memory = Any  # a torch CPU tensor or a writable buffer-protocol object


class Error(RuntimeError):
    code: str  # the status code's name: NotFound, DataLoss, Unavailable, InvalidArgument, ...
    message: str


class Layout:
    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: str = "bf16",
                 tokens_per_chunk: int = 16, name: str = "custom", latent: bool = False) -> None: ...
    @staticmethod
    def preset(name: str) -> "Layout": ...
    @staticmethod
    def from_json(text: str) -> "Layout": ...
    def to_json(self) -> str: ...
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    tokens_per_chunk: int
    latent: bool
    layer_slice_bytes: int
    chunk_kv_bytes: int
    chunk_object_bytes: int
    fingerprint: int


def chunk_keys(tokens: Iterable[int], layout: Layout, tenant: str | None = None,
               adapter: str | None = None, cache_salt: str | None = None) -> list[bytes]: ...


def encode_chunk(layout: Layout, key: Key, kv: Memory) -> bytes: ...


class Retrieval:
    hits: int
    def wait_for_layer(self, layer: int) -> None: ...
    def wait(self) -> None: ...


class Save:
    dropped: bool
    def save_layer(self, layer: int, source: Memory,
                   block_ids: Sequence[int] | None = None) -> None: ...


class Client:
    def __init__(self, endpoints: Sequence[str], bucket: str, layout: Layout,
                 access_key: str | None = None, secret_key: str | None = None,
                 dram_tier_bytes: int = 0, ca_file: str | None = None, timeout: float = 60.0,
                 retries: int = 3, write_behind_bytes: int = 268435456,
                 parallel_requests: int = 8, aggregated_streams: int = 1) -> None: ...
    layout: Layout
    def lookup(self, keys: Sequence[Key]) -> int: ...
    def pin(self, keys: Sequence[Key], ttl_seconds: float) -> list[bytes]: ...
    def retrieve_layerwise(self, keys: Sequence[Key], layers: int | tuple[int, int],
                           dest: Memory | Sequence[Memory], mode: str = "S3Agg-LW",
                           block_table: Sequence[int] | None = None,
                           compute_seconds_per_layer: float = 0.0) -> Retrieval: ...
    def store(self, key: Key, kv: Memory) -> None: ...
    def start_save(self, keys: Sequence[Key]) -> Save: ...
    def flush(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
