"""Human byte sizes: ``8gb``, ``512mb``, ``64KiB``, ``0``.

Redis's convention: ``kb/mb/gb`` are powers of 1024 and ``k/m/g`` powers of 1000;
``KiB/MiB/GiB`` are explicit binary units. Case-insensitive.
"""

from __future__ import annotations

import re

from pion.common.errors import ConfigError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
    "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(text: str | int, key: str = "size") -> int:
    """Parse a byte size; raises ConfigError naming ``key`` and the bad value."""
    if isinstance(text, int):
        if text < 0:
            raise ConfigError(f"{key}: size must be >= 0, got {text}")
        return text
    match = _SIZE_RE.match(text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise ConfigError(f"{key}: cannot parse size {text!r} (examples: 0, 4096, 512mb, 8gb, 64KiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])
