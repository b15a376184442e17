"""Rows and round trips shared by the codec tests that go through a real pion-server.

The through-server tests compare what the server returns with what the codec decodes in
process; they all need K-like rows (one outlier channel, optionally an attention-sink row),
the codec's own round trip, and a float32 range fetch.
"""

from __future__ import annotations

import numpy as np
import redis

from pion.codecs import get_codec


class CodecRows:
    """Helpers bound to one ``kv_dim``.

    ``outlier``: how channel 3 becomes an outlier, as in K — ``"shift"`` (+30) or ``"scale"`` (×30);
    ``sink``: a value for every element of row 0 (an attention sink), or None.
    """

    def __init__(self, kv_dim: int, outlier: str = "shift", sink: float | None = None) -> None:
        self.kv_dim = kv_dim
        self.outlier = outlier
        self.sink = sink

    def rows(self, n: int, seed: int) -> np.ndarray:
        x = np.random.default_rng(seed).standard_normal((n, self.kv_dim)).astype(np.float32)
        if self.outlier == "shift":
            x[:, 3] = 30 + x[:, 3]
        else:
            x[:, 3] *= 30
        if self.sink is not None:
            x[0] = self.sink
        return x

    def decoded(self, name: str, data: np.ndarray) -> np.ndarray:
        """What the codec ``name`` gives back for ``data`` (encode, then decode) in process."""
        codec = get_codec(name)
        return codec.decode(codec.encode(data), self.kv_dim)

    def fetch_f32(self, conn: redis.Redis, sid: str, layer: int, a: int, b: int) -> np.ndarray:
        """Rows ``a..b`` of a layer through ``V.FETCH … RANGE`` (float32, the default DTYPE)."""
        blob = conn.execute_command("V.FETCH", sid, layer, "RANGE", a, b)
        return np.frombuffer(blob, dtype="<f4").reshape(-1, self.kv_dim)
