"""Cap how many array slots hiredis allocates for one declared ``*N`` header.

hiredis' C reader checks every array header against its ``maxelements`` (default 2^32 - 1)
and pre-allocates a Python list of the declared size at once, so ``*3000000000`` cost a
client nothing and the server 24 GB of address space. hiredis-py does not expose the
setting. Lowering it to ``HOLD_ARRAYS_OVER`` (1,024) turns a larger header into a
ProtocolError that the network layer catches, after which ``RequestFramer`` (which buffers
large arrays until their bytes have arrived, and parses them itself) takes over the read.
This keeps a per-read regex scan for large headers off the hot path.

The field is reached with ctypes. Before touching a reader, ``capping_supported`` checks
on a probe reader that the layout is the one hiredis' ``read.h`` declares, using fields
whose values the public API shows (``maxbuf`` through ``setmaxbuf``/``getmaxbuf``,
``len`` through ``len()``, and the documented default of ``maxelements``). On any other
layout nothing is written and the caller scans reads instead (``LARGE_ARRAY_HEADER``).
"""

from __future__ import annotations

import ctypes
import functools

import hiredis

DEFAULT_MAX_ELEMENTS = (1 << 32) - 1  # hiredis' REDIS_READER_MAX_ARRAY_ELEMENTS


class _RedisReader(ctypes.Structure):
    """The head of hiredis' ``struct redisReader`` (read.h), up to ``maxelements``."""

    _fields_ = [
        ("err", ctypes.c_int),
        ("errstr", ctypes.c_char * 128),
        ("buf", ctypes.c_void_p),
        ("pos", ctypes.c_size_t),
        ("len", ctypes.c_size_t),
        ("maxbuf", ctypes.c_size_t),
        ("maxelements", ctypes.c_longlong),
    ]


def _struct_of(reader: hiredis.Reader) -> _RedisReader:
    # hiredis-py's Reader object: PyObject_HEAD, then ``redisReader *reader``.
    address = ctypes.c_void_p.from_address(id(reader) + object.__basicsize__).value
    if not address:
        raise ValueError("hiredis reader has no C reader")
    return _RedisReader.from_address(address)


@functools.cache
def capping_supported() -> bool:
    """True when this hiredis build's reader layout was verified on a probe reader."""
    probe = hiredis.Reader()
    try:
        probe.setmaxbuf(777_777)
        partial = b"*1\r\n$3\r\nab"
        probe.feed(partial)
        fields = _struct_of(probe)
        return bool(fields.maxbuf == probe.getmaxbuf() == 777_777
                    and fields.len == probe.len() == len(partial)
                    and fields.maxelements == DEFAULT_MAX_ELEMENTS and fields.err == 0)
    except (ValueError, OSError):
        return False


def cap_array_elements(reader: hiredis.Reader, max_elements: int) -> bool:
    """Make ``reader`` refuse array headers above ``max_elements``; False if unsupported."""
    if not capping_supported():
        return False
    _struct_of(reader).maxelements = max_elements
    return True
