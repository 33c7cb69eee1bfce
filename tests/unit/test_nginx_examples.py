"""The two nginx configurations for gateway replicas (examples/nginx for any host, docker/nginx
for compose) differ only in how they find the gateways: the e2e test runs the first against
real gateways (tests/e2e/test_gateway_replicas.py), this keeps the second its copy."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def without_upstream(text: str) -> str:
    text = re.sub(r"upstream warden_gateways \{.*?\n\}\n", "", text, flags=re.S)
    text = re.sub(r"^resolver .*\n", "", text, flags=re.M)
    return "\n".join(line for line in text.splitlines() if line and not line.startswith("#"))


def test_the_compose_proxy_is_the_example_with_the_compose_upstream() -> None:
    example = (ROOT / "examples" / "nginx" / "warden-gateways.conf").read_text()
    compose = (ROOT / "docker" / "nginx" / "warden-gateways.conf").read_text()
    assert without_upstream(example) == without_upstream(compose)
    assert "server gateway:8080 resolve" in compose
    assert "proxy_buffering off;" in compose and "X-Forwarded-For" in compose


def test_the_compose_file_scales_the_gateway_behind_the_proxy() -> None:
    compose = (ROOT / "docker" / "compose.gateways.yml").read_text()
    gateway = compose[compose.index("  gateway:") : compose.index("  proxy:")]
    proxy = compose[compose.index("  proxy:") :]
    assert "ports: !reset []" in gateway  # only the proxy publishes the address
    assert re.search(r"replicas: ([2-9]|\d\d)", gateway)
    assert "WARDEN_GATEWAY_TRUSTED_PROXIES" in gateway
    mounted = re.search(r"- \./(\S+):/etc/nginx/conf.d/default.conf:ro", proxy)
    assert mounted and (ROOT / mounted.group(1)).is_file()
    assert mounted.group(1) == "docker/nginx/warden-gateways.conf"
