"""Warden: a GPU cluster manager for machine-learning teams."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpu-warden")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

SERVICE_NAMES = ("monitor", "reservations", "jobs", "violations", "gateway")
