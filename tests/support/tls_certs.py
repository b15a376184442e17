"""A throw-away PKI made with the ``openssl`` CLI: a CA, a server certificate for 127.0.0.1 and
client certificates (one signed by the CA, one by a stranger CA), for the TLS tests and benchmark.

``openssl`` is used because the ``cryptography`` package is not a dependency of the project; the
CLI ships with every Debian image the tests run on. EC P-256 keys keep generation to milliseconds.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files; ``client_context`` builds what a client needs."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from a CA the server does not trust
    stranger_key: Path

    def server_args(self, tls_port: int, auth_clients: str = "yes") -> list[str]:
        """pion-server flags for a TLS listener on ``tls_port`` with this PKI."""
        return ["--tls-port", str(tls_port), "--tls-cert-file", str(self.server_cert),
                "--tls-key-file", str(self.server_key), "--tls-ca-cert-file", str(self.ca_cert),
                "--tls-auth-clients", auth_clients]

    def client_context(self, with_cert: bool = True, stranger: bool = False) -> ssl.SSLContext:
        """A client context that trusts the test CA and presents a client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        if stranger:
            context.load_cert_chain(self.stranger_cert, self.stranger_key)
        elif with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(name: str, cwd: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _key(name, cwd)
    _openssl("req", "-x509", "-new", "-key", f"{name}.key", "-sha256", "-days", "2", "-subj",
             f"/CN=Pion test {name}", "-out", f"{name}.crt", cwd=cwd)


def _signed(name: str, ca: str, cwd: Path, extensions: str) -> None:
    _key(name, cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN=pion-{name}", "-out", f"{name}.csr", cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
             cwd=cwd)


def make_test_pki(directory: Path) -> Pki:
    """Create the CA, server and client certificates under ``directory`` (about 0.1 s)."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("stranger-ca", directory)
    _signed("server", "ca", directory,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _signed("client", "ca", directory, "extendedKeyUsage=clientAuth\n")
    _signed("stranger", "stranger-ca", directory, "extendedKeyUsage=clientAuth\n")
    d = directory
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key",
                   d / "stranger.crt", d / "stranger.key")
