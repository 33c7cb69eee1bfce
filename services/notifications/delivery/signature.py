"""Signed webhook deliveries (`json` format with a `secret`): the HMAC a receiver checks.

Each request carries two headers:

    X-Warden-Timestamp: 1795363200                  (unix seconds when it was sent)
    X-Warden-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>", key = secret>

A receiver checks them on the raw body bytes, before parsing, and refuses stale timestamps
(replays). Copy this, or import `verify` from here:

    import hashlib, hmac, time

    def verify(secret, timestamp, body, signature, tolerance_s=300):
        try:
            age = abs(time.time() - int(timestamp))
        except ValueError:
            return False
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
        return age <= tolerance_s and hmac.compare_digest("sha256=" + mac.hexdigest(), signature)

A retried delivery is signed again with a fresh timestamp; `incident.incident_id` with
`incident.step_index` identifies one delivery, so a receiver can drop the duplicates that
at-least-once delivery brings.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Warden-Signature"
TIMESTAMP_HEADER = "X-Warden-Timestamp"


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 with key `secret` of "<timestamp>.<body>"."""
    message = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """What a receiver checks: the signature matches and the timestamp is recent."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, sent, body), signature)
