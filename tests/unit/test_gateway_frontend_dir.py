"""Which built web UI the gateway serves: the configured folder, else the build inside an
installed wheel (setup.py copies it to services/gateway/ui), else a checkout's frontend/dist."""

from __future__ import annotations

from pathlib import Path

from services.gateway.frontend import DEFAULT_DIST, dist_dir


def test_the_configured_folder_wins(tmp_path: Path) -> None:
    packaged = tmp_path / "ui"
    packaged.mkdir()
    (packaged / "index.html").write_text("<html>")
    assert dist_dir("/srv/ui", packaged) == Path("/srv/ui")


def test_an_installed_wheel_serves_the_build_inside_it(tmp_path: Path) -> None:
    packaged = tmp_path / "ui"
    packaged.mkdir()
    (packaged / "index.html").write_text("<html>")
    assert dist_dir("", packaged) == packaged


def test_a_checkout_serves_its_frontend_dist(tmp_path: Path) -> None:
    assert dist_dir("", tmp_path / "ui") == DEFAULT_DIST
    (tmp_path / "ui").mkdir()  # a folder without a build is no build
    assert dist_dir("", tmp_path / "ui") == DEFAULT_DIST
