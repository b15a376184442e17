"""Storage formats for K/V rows: one module per format family plus a lazy registry."""

from pion.codecs.base import Codec
from pion.codecs.registry import codec_names, get_codec, register_codec

__all__ = ["Codec", "codec_names", "get_codec", "register_codec"]
