"""The one build step pyproject.toml cannot say: the built web UI goes into the wheel.

`frontend/dist` (`make frontend`) is copied to `services/gateway/ui/`, where the gateway of an
installed wheel finds it (services/gateway/frontend.py). A wheel built without it serves the API
and says on `/` that the UI is not built. An editable install (`make install`) copies nothing:
the gateway of a checkout serves `frontend/dist` itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

UI_BUILD = Path(__file__).resolve().parent / "frontend" / "dist"


class BuildWithUi(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode or not (UI_BUILD / "index.html").is_file():
            return
        target = Path(self.build_lib) / "services" / "gateway" / "ui"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(UI_BUILD, target)


setup(cmdclass={"build_py": BuildWithUi})
