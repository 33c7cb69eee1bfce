"""The process's Prometheus metrics as a test that reads them needs them: without the series
that earlier tests of the session left (every service a test starts labels its metrics with a
new replica id, so a whole session leaves megabytes of exposition, and each scrape after it
takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.metrics import MetricWrapperBase

from services.shared import metrics


@pytest.fixture
def fresh_metrics() -> Iterator[None]:
    """Every `warden_*` metric without children when the test starts."""
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            value.clear()
    yield
