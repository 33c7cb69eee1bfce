"""Which hosts the monitor watches: those in the config, plus this machine through NVML."""

from __future__ import annotations

from services.monitor.readers import local_host_name
from services.shared.config import HostConfig, Settings


def monitored_hosts(settings: Settings, *, local_has_nvml: bool) -> list[HostConfig]:
    """The configured hosts, and this machine when `monitor.local_nvml` says so.

    `auto` adds this machine when NVML works here (it has an NVIDIA driver); `on` adds it
    anyway (it then shows "no GPU" if NVML is missing); `off` never does.
    """
    hosts = list(settings.hosts)
    wanted = settings.monitor.local_nvml == "on" or (
        settings.monitor.local_nvml == "auto" and local_has_nvml
    )
    if wanted and not any(host.probe == "nvml" for host in hosts):
        hosts.append(HostConfig(name=local_host_name(settings.monitor.local_name), probe="nvml"))
    return hosts
