"""A real OpenLDAP server (Debian's `slapd`) of the test's own, on a free loopback port.

    with running_slapd(tmp_path) as server:
        server.url  # ldap://127.0.0.1:PORT

Its directory (`dc=lab,dc=example`) is loaded offline with `slapadd` before it starts: the
service account `cn=warden,ou=services` (password SERVICE_PASSWORD), the users of USERS (each
with the password `<uid>-pw`) and the groups of GROUPS. `modify()` changes it while it runs
(as the root DN); `stop()`/`start()` take it away and bring it back on the same port and data.
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


def _config(directory: Path) -> str:
    includes = "\n".join(f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS)
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
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.config = directory / "slapd.conf"
        self.log = directory / "slapd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        (self.directory / "data").mkdir(parents=True)
        self.config.write_text(_config(self.directory))
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
                [_need("slapd"), "-f", str(self.config), "-h", self.url + "/", "-d", "0"],
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
def running_slapd(directory: Path) -> Iterator[Slapd]:
    server = Slapd(directory)
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()
