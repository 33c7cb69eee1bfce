"""`warden run` settles the garbage collector once its services have started."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from services.shared.runtime import GC_THRESHOLDS, settle_garbage_collector


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_what_start_up_loaded_is_frozen_and_collections_are_rarer(restored_gc: None) -> None:
    loaded = [{"reservation": i} for i in range(1000)]  # as a service's cache
    settle_garbage_collector()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_freeze_count() >= len(loaded)
