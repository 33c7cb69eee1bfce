"""A real OpenLDAP server (Debian's `slapd`) of the test's own, on a free loopback port.

    with running_slapd(tmp_path) as server:
        server.url  # ldap://127.0.0.1:PORT

Its directory (`dc=lab,dc=example`) is loaded offline with `slapadd` before it starts: the
service account `cn=warden,ou=services` (password SERVICE_PASSWORD), the users of USERS (each
with the password `<uid>-pw`) and the groups of GROUPS. `modify()` changes it while it runs
(as the root DN); `tls=True` makes it offer StartTLS; `stop()`/`start()` take it away and
bring it back on the same port and data.
A missing slapd fails the test and says which packages to install: never a silent skip.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.polling import until_sync
from tests.support.ports import free_port

SUFFIX = "dc=lab,dc=example"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "root-secret-pw"
SERVICE_DN = f"cn=warden,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "service-secret-pw"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS_DN = f"ou=groups,{SUFFIX}"
# uid → e-mail ("" for none)
USERS = {
    "carol": "carol@lab.example",
    "dave": "dave@lab.example",
    "erin": "erin@lab.example",
    "bob": "bob-in-the-directory@lab.example",  # the name of a local account too
    "nomail": "",
}
# group cn → members (uids)
GROUPS = {
    "gpu-users": ["carol", "dave", "bob", "nomail"],
    "ml": ["carol"],
    "warden-admins": ["dave"],
}
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


def password_of(uid: str) -> str:
    return f"{uid}-pw"


def user_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(cn: str) -> str:
    return f"cn={cn},{GROUPS_DN}"


def _ldif() -> str:
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: lab\no: Lab",
        f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: {GROUPS_DN}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        f"cn: warden\nuserPassword: {SERVICE_PASSWORD}",
    ]
    for uid, mail in USERS.items():
        lines = [
            f"dn: {user_dn(uid)}",
            "objectClass: inetOrgPerson",
            f"uid: {uid}",
            f"cn: {uid.title()}",
            f"sn: {uid.title()}",
            f"userPassword: {password_of(uid)}",
        ]
        if mail:
            lines.append(f"mail: {mail}")
        entries.append("\n".join(lines))
    for cn, members in GROUPS.items():
        lines = [f"dn: {group_dn(cn)}", "objectClass: groupOfNames", f"cn: {cn}"]
        lines += [f"member: {user_dn(uid)}" for uid in members]
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


def _openssl(*args: str) -> None:
    done = subprocess.run([_need("openssl"), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"openssl {args[0]} failed: {done.stderr}")


def make_certificates(directory: Path, name: str = "ca") -> tuple[Path, Path, Path]:
    """A CA of its own (`<name>.pem`) and a server certificate it signed for 127.0.0.1:
    (CA, certificate, key)."""
    ca, ca_key = directory / f"{name}.pem", directory / f"{name}.key"
    cert, key = directory / f"{name}-server.pem", directory / f"{name}-server.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    csr = directory / f"{name}-server.csr"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(key), "-out", str(csr),
    )  # fmt: skip
    extensions = directory / f"{name}-ext.cnf"
    extensions.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    return ca, cert, key


def _config(directory: Path, tls: tuple[Path, Path, Path] | None) -> str:
    includes = "\n".join(f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS)
    if tls is not None:
        ca, cert, key = tls
        includes += (
            f"\nTLSCACertificateFile {ca}\nTLSCertificateFile {cert}\nTLSCertificateKeyFile {key}"
        )
    return f"""{includes}
pidfile {directory}/slapd.pid
argsfile {directory}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 16777216
suffix "{SUFFIX}"
rootdn "{ROOT_DN}"
rootpw {ROOT_PASSWORD}
directory {directory}/data
access to attrs=userPassword by self write by anonymous auth by * none
access to * by users read by * none
"""


def _need(program: str) -> str:
    found = shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(
            f"{program} is not installed: the LDAP tests run a real OpenLDAP server "
            "(apt-get install slapd ldap-utils; .ci/run installs them)"
        )
    return found


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


class Slapd:
    def __init__(self, directory: Path, *, tls: bool = False) -> None:
        self.directory = directory
        # (CA, certificate, key) when it offers StartTLS
        self.tls = make_certificates(directory) if tls else None
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        # With tls: also ldaps:// (TLS from the first byte) on a port of its own.
        self.tls_port = free_port() if tls else None
        self.ldaps_url = f"ldaps://127.0.0.1:{self.tls_port}" if tls else ""
        self.config = directory / "slapd.conf"
        self.log = directory / "slapd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        (self.directory / "data").mkdir(parents=True)
        self.config.write_text(_config(self.directory, self.tls))
        ldif = self.directory / "lab.ldif"
        ldif.write_text(_ldif())
        loaded = subprocess.run(
            [_need("slapadd"), "-f", str(self.config), "-l", str(ldif)],
            capture_output=True,
            text=True,
            check=False,
        )
        if loaded.returncode != 0:
            pytest.fail(f"slapadd could not load the test directory: {loaded.stderr}")

    def start(self) -> None:
        with self.log.open("ab") as log:
            # -d 0: in the foreground (a child of the test, killed by it), logging nothing.
            self.process = subprocess.Popen(
                [_need("slapd"), "-f", str(self.config), "-h", self.listen(), "-d", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        until_sync(
            lambda: (
                self.process is not None
                and (self.process.poll() is not None or _accepts(self.port))
            ),
            f"slapd listening on {self.url}",
            report=lambda: self.log.read_text(errors="replace")[-2000:],
        )
        if self.process.poll() is not None:
            pytest.fail(f"slapd exited at start: {self.log.read_text(errors='replace')[-2000:]}")

    def _listening(self) -> bool:
        return _accepts(self.port) and (self.tls_port is None or _accepts(self.tls_port))

    def listen(self) -> str:
        return f"{self.url}/ {self.ldaps_url}/" if self.ldaps_url else f"{self.url}/"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def modify(self, ldif: str) -> None:
        """Apply an LDIF change (ldapmodify) as the root DN."""
        changed = subprocess.run(
            [_need("ldapmodify"), "-x", "-H", self.url, "-D", ROOT_DN, "-w", ROOT_PASSWORD],
            input=ldif,
            capture_output=True,
            text=True,
            check=False,
        )
        assert changed.returncode == 0, changed.stderr


@contextlib.contextmanager
def running_slapd(directory: Path, *, tls: bool = False) -> Iterator[Slapd]:
    """slapd on a free loopback port; `tls`: offering StartTLS with a certificate of a CA of
    its own (`server.tls[0]`)."""
    server = Slapd(directory, tls=tls)
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()
