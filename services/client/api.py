"""A small synchronous client of Warden's REST API (`/api/v1`), for the `warden` commands.

It sends the stored access token, and when the server answers 401 `authentication_failed`
(the token expired, or is not valid any more) it trades the refresh token for new tokens once,
stores them (the old refresh token stops working) and sends the request again. Failures become
`ClientError`s whose text is ready for a terminal: the server's message and, for refusals,
each reason on its own line. Tokens are never part of any message.

Standard library only (urllib): one blocking request at a time is all a command needs.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from services import __version__
from services.client.store import Credentials, CredentialStore

API = "/api/v1"
DEFAULT_TIMEOUT_S = 60.0
MAX_REASONS_IN_MESSAGE = 3  # the services put this many reasons in an error's message

# A heading for a refusal whose message only repeats its reasons (listed below it).
REFUSAL_HEADINGS = {
    "reservation_conflict": "refused: the GPUs are reserved",
    "not_allowed": "refused: not allowed",
    "forbidden": "refused: not allowed",
    "invalid_request": "refused: invalid request",
    "state_conflict": "refused",
}


class ClientError(Exception):
    """A failure a command reports on stderr (exit status 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> list[str]:
        return [self.message]


class ServerUnreachable(ClientError):
    pass


class NotSignedIn(ClientError):
    pass


class ApiError(ClientError):
    """The server answered with an error envelope `{error, message, details}`."""

    def __init__(
        self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details: Mapping[str, Any] = details or {}

    @property
    def reasons(self) -> list[str]:
        return reason_texts(self.details)

    def lines(self) -> list[str]:
        return error_lines(self.code, self.message, self.reasons)


def reason_texts(details: Any) -> list[str]:
    """`details.reasons` as text, one per reason: strings as they are, dicts by their
    `message` (the services' refusals: `{code, message, ...}`) or `reason`."""
    if not isinstance(details, Mapping):
        return []
    reasons = details.get("reasons")
    if not isinstance(reasons, list):
        return []
    texts = []
    for reason in reasons:
        if isinstance(reason, Mapping):
            text = reason.get("message") or reason.get("reason")
            texts.append(str(text) if text else json.dumps(dict(reason), sort_keys=True))
        else:
            texts.append(str(reason))
    return texts


def error_lines(code: str, message: str, reasons: list[str]) -> list[str]:
    """The message, then each reason on its own line (`  - ...`). When the message only
    joins the reasons (as refusals do), a short heading replaces it."""
    if not reasons:
        return [message]
    repeats = all(reason in message for reason in reasons[:MAX_REASONS_IN_MESSAGE])
    heading = f"{REFUSAL_HEADINGS.get(code, 'refused')}:" if repeats else message
    return [heading, *(f"  - {reason}" for reason in reasons)]


def format_error(err: ClientError) -> str:
    return "\n".join(err.lines())


def unreachable_message(server: str, reason: object) -> str:
    return (
        f"cannot reach the Warden server at {server}: {reason} "
        "(is it running? `warden login --server URL`)"
    )


def _query_string(query: Mapping[str, Any] | None) -> str:
    if not query:
        return ""
    pairs: list[tuple[str, str]] = []
    for key, value in query.items():
        if value is None:
            continue
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, bool):
                pairs.append((key, "true" if item else "false"))
            else:
                pairs.append((key, str(item)))
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


def _parsed(raw: bytes) -> Any:
    if not raw.strip():
        return None
    return json.loads(raw.decode("utf-8"))


class Api:
    """Requests to one server, as the stored user (or nobody, for `auth=False`)."""

    def __init__(
        self,
        server: str,
        *,
        credentials: Credentials | None = None,
        store: CredentialStore | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.server = server
        self.credentials = credentials
        self.store = store
        self.timeout = timeout

    # -- requests ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        auth: bool = True,
    ) -> Any:
        if auth and (self.credentials is None or not self.credentials.signed_in):
            raise NotSignedIn(
                f"not signed in to {self.server}: "
                "run `warden login` (or `warden login --server URL`)"
            )
        try:
            return self._send(method, path, query, body, auth)
        except ApiError as err:
            if not (auth and err.status == 401 and err.code == "authentication_failed"):
                raise
        self._refresh()
        return self._send(method, path, query, body, auth)

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None, *, auth: bool = True) -> Any:
        return self.request("POST", path, body=body, auth=auth)

    def delete(self, path: str, **query: Any) -> Any:
        return self.request("DELETE", path, query=query)

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        auth: bool,
    ) -> Any:
        url = self.server + API + path + _query_string(query)
        headers = {"Accept": "application/json", "User-Agent": f"warden-cli/{__version__}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if auth and self.credentials is not None and self.credentials.access_token:
            headers["Authorization"] = f"Bearer {self.credentials.access_token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise self._api_error(err.code, err.reason, err.read()) from None
        except urllib.error.URLError as err:
            reason = getattr(err.reason, "strerror", None) or err.reason
            raise ServerUnreachable(unreachable_message(self.server, reason)) from None
        except TimeoutError:
            raise ServerUnreachable(
                f"the Warden server at {self.server} did not answer within {self.timeout:g}s"
            ) from None
        except (OSError, http.client.HTTPException) as err:
            raise ServerUnreachable(unreachable_message(self.server, err)) from None
        try:
            return _parsed(raw)
        except ValueError:
            raise ClientError(
                f"the server at {self.server} did not answer with JSON: is it a Warden server?"
            ) from None

    def _api_error(self, status: int, reason: object, raw: bytes) -> ApiError:
        try:
            envelope = _parsed(raw)
        except ValueError:
            envelope = None
        if isinstance(envelope, dict) and isinstance(envelope.get("error"), str):
            details = envelope.get("details")
            return ApiError(
                status,
                envelope["error"],
                str(envelope.get("message") or envelope["error"]),
                details if isinstance(details, dict) else {},
            )
        return ApiError(
            status,
            f"http_{status}",
            f"the server at {self.server} answered HTTP {status} {reason}: is it a Warden server?",
        )

    # -- the session ------------------------------------------------------------------------

    def _refresh(self) -> None:
        """New tokens for the stored refresh token, stored at once (it works only once)."""
        assert self.credentials is not None
        expired = NotSignedIn(
            "your session expired or was signed out: sign in again with `warden login`"
        )
        if self.store is None:
            raise expired
        with self.store.locked():
            stored = self.store.load()
            if (
                stored is not None
                and stored.signed_in
                and stored.refresh_token != self.credentials.refresh_token
            ):
                # Another command refreshed meanwhile: use its tokens (a refresh token
                # used twice would revoke the whole login).
                self.credentials.access_token = stored.access_token
                self.credentials.refresh_token = stored.refresh_token
                return
            if not self.credentials.refresh_token:
                raise expired
            try:
                tokens = self._send(
                    "POST",
                    "/session/refresh",
                    None,
                    {"refresh_token": self.credentials.refresh_token},
                    False,
                )
            except ApiError as err:
                if err.status in (401, 422):
                    raise expired from None
                raise
            self.adopt(tokens)

    def adopt(self, tokens: Mapping[str, Any]) -> None:
        """Keep (and store) the tokens of a login or refresh answer."""
        assert self.credentials is not None
        self.credentials.access_token = str(tokens["access_token"])
        self.credentials.refresh_token = str(tokens["refresh_token"])
        user = tokens.get("user")
        if isinstance(user, Mapping) and user.get("username"):
            self.credentials.username = str(user["username"])
        if self.store is not None:
            self.store.save(self.credentials)

    def login(self, username: str, password: str) -> dict[str, Any]:
        """Sign in and store the server, the user and the tokens; the answer's `user`."""
        tokens = self.request(
            "POST", "/session", body={"username": username, "password": password}, auth=False
        )
        if not isinstance(tokens, dict) or "access_token" not in tokens:
            raise ClientError(f"the server at {self.server} did not answer with tokens")
        self.credentials = Credentials(self.server, username)
        self.adopt(tokens)
        user: dict[str, Any] = tokens.get("user") or {"username": username}
        return user

    def logout(self) -> None:
        """Revoke the refresh token on the server (the caller deletes the stored file)."""
        if self.credentials is not None and self.credentials.refresh_token:
            self.request(
                "POST",
                "/session/logout",
                body={"refresh_token": self.credentials.refresh_token},
                auth=False,
            )
