"""Warden: a GPU cluster manager for machine-learning teams."""

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    """The installed package's: the server (gpu-warden) or the client alone (gpu-warden-client)."""
    for distribution in ("gpu-warden", "gpu-warden-client"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "0.0.0"  # running from a source tree that was never installed


__version__ = _version()

SERVICE_NAMES = ("monitor", "reservations", "jobs", "violations", "gateway")
# The services with a database of their own (the gateway has none).
SERVICES_WITH_DATABASE = ("monitor", "reservations", "jobs", "violations")
