"""Certificates for the TLS tests of the compat suites (pytest and the CLI
driver), made with the openssl CLI: a self-signed CA and a `localhost`
server certificate it signs. No test framework here: the CLI driver runs
on the system Python."""

import subprocess
from pathlib import Path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA (EC P-256): its certificate and key."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    return cert, key


def issue_server(directory: Path, ca: tuple[Path, Path], cert: Path, key: Path) -> None:
    """A certificate for `localhost` signed by `ca`, written to cert/key."""
    request = directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text(
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(request), "-subj", "/CN=localhost",
    )
    openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extensions),
    )
