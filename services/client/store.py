"""The command-line client's credentials file: which server, who, and the session's tokens.

`$XDG_CONFIG_HOME/warden/client.json` (else `~/.config/warden/client.json`), readable by its
owner only (0600, written atomically). `$WARDEN_SERVER` overrides the stored server. A lock
file beside it serialises token refreshes between `warden` commands run at the same time: a
refresh token used twice revokes the whole login, so a second command adopts the tokens the
first one stored instead of refreshing again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.client.local_config import configured_server

try:  # POSIX; elsewhere concurrent refreshes are simply not serialised
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

DEFAULT_SERVER = "http://127.0.0.1:8080"
FILE_NAME = "client.json"


class CredentialsError(Exception):
    """The credentials file exists but cannot be used (unreadable, not our format)."""


@dataclass
class Credentials:
    """What `warden login` keeps. The tokens never appear in a repr (nor anywhere printed)."""

    server: str
    username: str | None = None
    access_token: str | None = field(default=None, repr=False)
    refresh_token: str | None = field(default=None, repr=False)

    @property
    def signed_in(self) -> bool:
        return bool(self.access_token and self.refresh_token)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Credentials:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) and value else None

        server = text("server")
        if server is None:
            raise CredentialsError("it names no server")
        return cls(server, text("username"), text("access_token"), text("refresh_token"))


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    base = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(base) / "warden"


def credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / FILE_NAME


def normalize_server(url: str) -> str:
    """`host:8080`, `http://host:8080/`, `http://host:8080/api/v1` → `http://host:8080`."""
    url = url.strip()
    if not url:
        raise ValueError("the server URL is empty")
    if "://" not in url:
        url = "http://" + url
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"the server URL must start with http:// or https:// (got {url!r})")
    url = url.rstrip("/")
    url = url.removesuffix("/api/v1")
    return url.rstrip("/")


def server_url(
    stored: Credentials | None, given: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The server to talk to: `given` (--server), else $WARDEN_SERVER, else the stored one,
    else the one this machine's Warden config names (`local_config.py`)."""
    environ = os.environ if environ is None else environ
    chosen = given or environ.get("WARDEN_SERVER") or (stored.server if stored else None)
    return normalize_server(chosen or configured_server(environ) or DEFAULT_SERVER)


class CredentialStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else credentials_path()

    def load(self) -> Credentials | None:
        """The stored credentials; None when there is no file."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise CredentialsError(f"cannot read {self.path}: {err.strerror}") from err
        try:
            data = json.loads(text)
        except ValueError as err:
            raise CredentialsError(f"{self.path} is not valid JSON") from err
        if not isinstance(data, dict):
            raise CredentialsError(f"{self.path} is not a JSON object")
        try:
            return Credentials.from_dict(data)
        except CredentialsError as err:
            raise CredentialsError(f"{self.path}: {err}") from err

    def save(self, credentials: Credentials) -> None:
        """Write atomically, readable by the owner only, whatever the umask."""
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = directory / f".{self.path.name}.{os.getpid()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(credentials.to_dict(), out, indent=2)
                out.write("\n")
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise

    def delete(self) -> bool:
        """Remove the file; False when there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while refreshing tokens, across processes (a no-op without fcntl)."""
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock
