"""The operators' files in docker/: the Grafana dashboard asks only for metrics Warden exports
(and groups by labels they have), Prometheus scrapes every service where compose serves its
metrics, and Grafana is provisioned with the data source the panels name.

(tests/e2e/test_prometheus.py runs every panel's query against a real Prometheus.)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services import SERVICE_NAMES
from services.shared.metrics import GAUGES, LABELS, REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker/grafana/warden-dashboard.json"
PROMETHEUS = ROOT / "docker/prometheus/prometheus.yml"
DATASOURCES = ROOT / "docker/grafana/provisioning/datasources/prometheus.yml"
COMPOSE = ROOT / "docker-compose.yml"

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def exported() -> dict[str, set[str]]:
    """Every sample name this process's registry can export -> its label names."""
    found: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        labels = {name for sample in family.samples for name in sample.labels}
        for suffix in _SUFFIXES.get(family.type, ("",)):
            found[family.name + suffix] = labels
    for collector in list(REGISTRY._collector_to_names):  # the labelled, yet unused metrics
        describe = getattr(collector, "_labelnames", None)
        name = getattr(collector, "_name", None)
        kind = getattr(collector, "_type", None)
        if name and describe is not None:
            for suffix in _SUFFIXES.get(kind or "", ("",)):
                found[name + suffix] = {*describe, "le"} if kind == "histogram" else set(describe)
    for name, (_help, extra) in GAUGES.items():  # scrape-time gauges
        found[name] = {*LABELS, *extra}
    return found


def panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [target["expr"] for panel in panels() for target in panel["targets"]]


def test_every_panel_queries_metrics_that_warden_exports_by_labels_they_have() -> None:
    names = exported()
    assert {"warden_rpc_server_duration_seconds_bucket", "warden_replica_leader"} <= names.keys()
    assert panels(), "the dashboard has no panels"
    for panel in panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
    for expr in expressions():
        used = set(re.findall(r"\b((?:warden|process)_[a-z0-9_]+)\b", expr))
        assert used, f"{expr!r} names no Warden metric"
        unknown = used - names.keys()
        assert not unknown, f"{expr!r} asks for {unknown}, which nothing exports"
        for grouping in re.findall(r"by \(([^)]*)\)", expr):
            wanted = {label.strip() for label in grouping.split(",")}
            have = set().union(*(names[name] for name in used))
            assert wanted <= have | {"le"}, f"{expr!r} groups by {wanted - have}"
        assert expr.count("(") == expr.count(")"), expr


def test_the_panels_use_the_provisioned_data_source() -> None:
    [source] = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}
    uids = [p["id"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    assert len(uids) == len(set(uids)), "panel ids repeat"


def test_prometheus_scrapes_every_service_where_compose_serves_its_metrics() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "warden"]
    [discovery] = job["dns_sd_configs"]
    assert sorted(discovery["names"]) == sorted(SERVICE_NAMES)
    compose = yaml.safe_load(COMPOSE.read_text())
    env = compose["x-warden-env"]
    assert env["WARDEN_METRICS_PORT"] == str(discovery["port"])
    assert env["WARDEN_METRICS_HOST"] == "0.0.0.0"
    services = compose["services"]
    for name in SERVICE_NAMES:  # scalable: no fixed name; only the gateway publishes a port
        assert "container_name" not in services[name], name
        assert name == "gateway" or "ports" not in services[name], name
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            assert not source.startswith("./") or (ROOT / source).exists(), volume


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)
def test_promtool_accepts_the_prometheus_config() -> None:
    done = subprocess.run(
        ["promtool", "check", "config", str(PROMETHEUS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
