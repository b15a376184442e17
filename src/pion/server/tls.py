"""TLS for the RESP port and the binary lane: one server ``SSLContext`` built from Redis's options.

Why a second listener and not a switch on the first: Redis keeps ``port`` and ``tls-port``
apart so one server can take plain loopback clients (pion-llm on the same host) and TLS
clients from other hosts at once; so do we. ``--tls-port`` opens the TLS RESP listener
(``rediss://``), ``--tls-binary-port`` (default ``tls-port + 1``) the TLS binary lane. Both
run the very same ``Connection`` / ``BinaryConnection`` protocols as the plain ports: TLS is
only the transport (uvloop's SSL protocol), so answers, errors and limits are identical.

Options and their Redis meaning:
  ``--tls-cert-file`` / ``--tls-key-file``  the server's certificate chain and key (PEM), required
  ``--tls-ca-cert-file``  the CA that client certificates must chain to; required unless
                          ``--tls-auth-clients no`` (Redis refuses to start without it too)
  ``--tls-auth-clients``  ``yes`` (default): a client without a valid certificate fails the
                          handshake; ``optional``: a certificate, if sent, must be valid;
                          ``no``: none is asked for
TLS 1.2 is the floor (Redis's default ``tls-protocols "TLSv1.2 TLSv1.3"``). A certificate
identifies a client but grants nothing by itself: ``--requirepass`` still applies.
A missing or unreadable file, a key that does not match, or a missing CA is a ``ConfigError``
naming the option and the file (pion-server exits 2 before listening).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from pion.common.errors import ConfigError
from pion.server.config import ServerConfig

_VERIFY_MODES = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


def tls_enabled(config: ServerConfig) -> bool:
    """True when a TLS listener (RESP or binary lane) is configured."""
    return config.tls_port > 0


def tls_only(config: ServerConfig) -> bool:
    """``--port 0`` with ``--tls-port``: no plain RESP listener, Redis's meaning of ``port 0``
    (without ``--tls-port``, ``--port 0`` still means "any free port", what tests and ``-w N``
    use). The plain binary lane then stays off too unless ``--binary-port`` names a port."""
    return config.port == 0 and tls_enabled(config)


def tls_binary_port(config: ServerConfig) -> int:
    """Where the TLS binary lane listens: 0 = nowhere (no TLS, or ``--tls-binary-port 0``)."""
    if not tls_enabled(config) or config.tls_binary_port == 0:
        return 0
    return config.tls_binary_port if config.tls_binary_port > 0 else config.tls_port + 1


def make_server_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The server context for both TLS listeners, or None without ``--tls-port``.

    Raises:
        ConfigError: a required file is not given, cannot be read, or does not hold what
            its option names (the message names the option and the path).
    """
    if not tls_enabled(config):
        return None
    cert = _required(config.tls_cert_file, "--tls-cert-file")
    key = _required(config.tls_key_file, "--tls-key-file")
    mode = _VERIFY_MODES[config.tls_auth_clients]
    ca = config.tls_ca_cert_file
    if ca is None and mode != ssl.CERT_NONE:
        raise ConfigError(f"--tls-ca-cert-file: required when --tls-auth-clients is "
                          f"{config.tls_auth_clients} (the CA that client certificates must chain to); "
                          "or start with --tls-auth-clients no")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert-file/--tls-key-file: cannot load {cert} with key {key}: "
                          f"{_reason(exc)}") from exc
    if ca is not None:
        try:
            context.load_verify_locations(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--tls-ca-cert-file: cannot load {ca}: {_reason(exc)}") from exc
    context.verify_mode = mode
    return context


def _required(path: Path | None, flag: str) -> Path:
    if path is None:
        raise ConfigError(f"{flag}: required with --tls-port")
    if not path.is_file():
        raise ConfigError(f"{flag}: no such file {str(path)!r}")
    return path


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return getattr(exc, "strerror", None) or str(exc)
