"""What the app holds for its handlers (aiohttp app keys), apart from the app that sets it."""

from __future__ import annotations

import asyncio

from aiohttp import web

from services.gateway.auth import Revocations, TokenIssuer
from services.gateway.calendar import CalendarView
from services.gateway.fleet_board import FleetBoard
from services.gateway.limits import Limits
from services.gateway.stream import StreamHub
from services.shared.bus import Bus, Teardown
from services.shared.cluster.replicas import Replicas
from services.shared.config import Settings

SETTINGS = web.AppKey("settings", Settings)
BUS = web.AppKey("bus", Bus)
TOKENS = web.AppKey("tokens", TokenIssuer)
LIMITS = web.AppKey("limits", Limits)
REVOCATIONS = web.AppKey("revocations", Revocations)
STREAM = web.AppKey("stream", StreamHub)
CALENDAR = web.AppKey("calendar", CalendarView)
BOARD = web.AppKey("hosts_board", FleetBoard)
BACKGROUND = web.AppKey("background", list[asyncio.Task[None]])
BACKGROUND_TEARDOWNS = web.AppKey("background_teardowns", list[Teardown])
# The live replicas of every service, as this gateway hears their heartbeats (health).
REPLICAS = web.AppKey("replicas", Replicas)
