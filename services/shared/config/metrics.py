"""`[metrics]`: where Prometheus reads each process's metrics (services/shared/metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from marshmallow import ValidationError, validate

from services.shared.config.declare import option

MIN_TOKEN_LENGTH = 24


class EmptyOrLong(validate.Validator):
    def __call__(self, value: str) -> str:
        if value and len(value) < MIN_TOKEN_LENGTH:
            raise ValidationError(f"use {MIN_TOKEN_LENGTH} characters or more (or none)")
        return value


@dataclass(frozen=True)
class MetricsSettings:
    """Prometheus metrics (`GET /metrics`) of every service process."""

    port: int = option(
        0,
        "Port of a listener of this process's own that serves GET /metrics to anyone who "
        "reaches it (every service, `warden run all` included); 0: no listener. Compose "
        "sets 9100.",
        min=0,
        max=65535,
    )
    host: str = option(
        "127.0.0.1",
        "Address of that listener; 0.0.0.0 only on a network where Prometheus alone reaches it.",
        min_length=1,
    )
    token: str = option(
        "",
        "A bearer token that may also read GET /metrics on the gateway's own port (admins "
        f"always may); empty: admins only. {MIN_TOKEN_LENGTH} characters or more.",
        secret=True,
        check=EmptyOrLong(),
    )
