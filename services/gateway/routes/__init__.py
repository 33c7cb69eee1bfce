"""Every route of the API, by resource. Each module declares `ROUTES` (see `routing.Route`)."""

from __future__ import annotations

from services.gateway.routes import (
    account_links,
    accounts,
    calendar_feed,
    delivery,
    hosts,
    idle,
    inventory,
    jobs,
    maintenance,
    meta,
    notifications,
    queue,
    reports,
    reservations,
    session,
    setup,
    signup,
    violations,
)
from services.gateway.routing import Route

ROUTES: tuple[Route, ...] = (
    *meta.ROUTES,
    *session.ROUTES,
    *setup.ROUTES,
    *signup.ROUTES,
    *accounts.ROUTES,
    *account_links.ROUTES,
    *hosts.ROUTES,
    *inventory.ROUTES,
    *reservations.ROUTES,
    *calendar_feed.ROUTES,
    *idle.ROUTES,
    *maintenance.ROUTES,
    *jobs.ROUTES,
    *queue.ROUTES,
    *violations.ROUTES,
    *reports.ROUTES,
    *notifications.ROUTES,
    *delivery.ROUTES,
)
