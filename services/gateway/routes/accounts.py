"""Routes of the API: accounts (to be written)."""

from __future__ import annotations

from services.gateway.routing import Route

ROUTES: tuple[Route, ...] = ()
