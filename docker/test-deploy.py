"""`make test-deploy`: Warden's compose deployment, really run with podman-compose.

Builds the images (locally from Debian packages: docker/compose.local.yml), then, as a lab
would: `warden init --compose` writes the secrets, `podman-compose up -d`, the five services
answer `ok`, the first admin is created and signs in, a simulated GPU host (a container on the
compose network, served by `warden sim`) is checked and added through the API and its GPUs
appear, a reservation is made; the reservations container is killed and comes back healthy on
its own; `down` (volumes kept) and `up -d` again find the account, the host and the
reservation still there. Finally `down -v` removes this test's containers and volumes (the
images stay cached, so a second run skips most of the build).

Runs as root with podman (see docker/local/containers.conf for sandboxed machines). Its own
project name, .env and host ports keep it apart from a real deployment on the same machine.
Every command is printed; on a failure the containers' logs are printed and it exits 1.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv this runs in: podman-compose
WARDEN = ROOT / "bin/warden"  # as the README says: the checkout's warden, from its .venv
PROJECT = os.environ.get("WARDEN_DEPLOY_PROJECT", "warden-test-deploy")
IMAGE = "gpu-warden:latest"
SERVICES = ("gateway", "monitor", "reservations", "jobs", "violations")
SIM_HOST, SIM_PORT, SIM_GPUS = "sim-1", 2222, 4
KEY_FILE = "/var/lib/warden/ssh/id_ed25519"  # WARDEN_SSH_KEY_FILE in docker-compose.yml
ADMIN = "admin"
# Generous: a cold start on a loaded 2-core machine; a warm one takes seconds.
HEALTH_DEADLINE_S = 600
STARTED = time.monotonic()


class DeployFailed(Exception):
    pass


def say(text: str) -> None:
    print(f"\n==> [{time.monotonic() - STARTED:6.1f} s] {text}", flush=True)


def run(cmd: Sequence[str], *, check: bool = True, quiet: bool = False, **kw: Any) -> str:
    """Run `cmd` and print it, with its output as it comes unless quiet; its output."""
    print("$ " + shlex.join(cmd), flush=True)
    with subprocess.Popen(
        cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw
    ) as process:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if not quiet:
                print(line, end="", flush=True)
    output = "".join(lines)
    if check and process.returncode != 0:
        if quiet:
            print(output.rstrip())
        raise DeployFailed(f"`{shlex.join(cmd)}` exited with {process.returncode}")
    return output


def until(what: str, probe: Callable[[], Any], deadline_s: float = HEALTH_DEADLINE_S) -> Any:
    """Call `probe` every 2 s until it returns something truthy; fail after `deadline_s`."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = probe()
        except (OSError, DeployFailed, ValueError) as err:  # not up yet
            last = err
        else:
            if last:
                return last
        time.sleep(2)
    raise DeployFailed(f"{what}: not within {deadline_s:.0f} s (last: {last!r})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.token = ""

    def call(
        self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200, 201)
    ) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {self.token}"} if self.token else {}),
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode()
        if status not in ok:
            raise DeployFailed(f"{method} {path}: HTTP {status} {text[:500]}")
        return status, (json.loads(text) if text else None)

    def health(self) -> dict[str, Any] | None:
        _, answer = self.call("GET", "/health", ok=(200, 503))
        return answer if answer and answer.get("status") == "ok" else None

    def sign_in(self, password: str) -> None:
        self.token = ""
        _, answer = self.call("POST", "/session", {"username": ADMIN, "password": password})
        self.token = answer["access_token"]


class Deployment:
    def __init__(self, work: Path, compose_cmd: list[str]) -> None:
        self.work = work
        self.env_file = work / ".env"
        self.port = free_port()
        self.compose_cmd = compose_cmd
        self.api = Api(self.port)
        self.password = secrets.token_urlsafe(16)

    def cli(self, *args: str) -> str:
        """`warden ARGS` as an admin on the head node runs it: the CLI client, on this server."""
        env = os.environ | {
            "WARDEN_SERVER": f"http://127.0.0.1:{self.port}",
            "WARDEN_PASSWORD": self.password,
            "XDG_CONFIG_HOME": str(self.work / "config"),  # not the developer's session
        }
        return run([str(WARDEN), *args], env=env)

    def compose(self, *args: str, **kw: Any) -> str:
        return run([*self.compose_cmd, *args], cwd=ROOT, **kw)

    def container(self, service: str) -> str:
        found = run(
            [
                "podman",
                "ps",
                "-q",
                "--filter",
                f"label=io.podman.compose.project={PROJECT}",
                "--filter",
                f"label=com.docker.compose.service={service}",
            ],
            quiet=True,
        ).split()
        if len(found) != 1:
            raise DeployFailed(f"expected one running {service} container, found {found}")
        return found[0]

    def network(self) -> str:
        """The compose network (the gateway's), where the simulated host joins."""
        fmt = "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}"
        return run(
            ["podman", "inspect", "--format", fmt, self.container("gateway")], quiet=True
        ).split()[0]

    def wait_healthy(self) -> None:
        say(f"waiting for all five services to answer ok on {self.api.base}/health")
        answer = until("GET /api/v1/health answers ok for every service", self.api.health)
        states = {name: state["status"] for name, state in answer["services"].items()}
        print(f"health: {answer['status']}, bus {answer['bus']['status']}, {states}")
        missing = set(SERVICES) - {name for name, s in states.items() if s == "ok"}
        if missing:
            raise DeployFailed(f"not ok: {sorted(missing)}")

    def logs(self) -> None:
        print("\n---------- podman-compose ps ----------", flush=True)
        self.compose("ps", check=False)
        for service in ("rabbitmq", "postgres", "migrate", *SERVICES):
            print(f"\n---------- logs of {service} (last 60 lines) ----------", flush=True)
            self.compose("logs", "--tail", "60", service, check=False)
        print(f"\n---------- logs of {PROJECT}-simhost ----------", flush=True)
        run(["podman", "logs", "--tail", "30", f"{PROJECT}-simhost"], check=False)


def prepare() -> list[str]:
    """podman's settings, podman-compose, the base images and wheels; the compose command."""
    if "CONTAINERS_CONF" not in os.environ and not Path("/etc/containers/containers.conf").exists():
        # This machine's podman needs runc, cgroupfs and no ulimits (docker/local/containers.conf).
        os.environ["CONTAINERS_CONF"] = str(ROOT / "docker/local/containers.conf")
        print(f"CONTAINERS_CONF={os.environ['CONTAINERS_CONF']}")
    if shutil.which("podman") is None:
        raise DeployFailed("podman is not installed (apt-get install podman; see .ci/run)")
    podman_compose = shutil.which("podman-compose", path=str(BIN)) or shutil.which("podman-compose")
    if podman_compose is None:
        say("installing podman-compose from PyPI (Debian's is too old)")
        run([str(BIN / "python"), "-m", "pip", "install", "--quiet", "podman-compose==1.6.0"])
        podman_compose = str(BIN / "podman-compose")

    say("base images from Debian packages (kept when present)")
    run([str(ROOT / "docker/local/build-base-images.sh")])

    wheels = ROOT / "docker/wheels"
    stamp = wheels / ".pyproject.toml"
    pyproject = (ROOT / "pyproject.toml").read_text()
    if not stamp.exists() or stamp.read_text() != pyproject:
        say("wheels of Warden's dependencies for the offline image build (docker/wheels)")
        for old in wheels.glob("*.whl"):
            old.unlink()
        run(
            [
                str(BIN / "python"),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "-w",
                str(wheels),
                ".",
                "setuptools",
                "setuptools-scm",  # the build's version (given by WARDEN_VERSION in the image)
                "wheel",
            ],
            cwd=ROOT,
        )
        for own in wheels.glob("gpu_warden-*.whl"):  # the image builds Warden from its source
            own.unlink()
        stamp.write_text(pyproject)
    if not (ROOT / "frontend/dist/index.html").exists():
        raise DeployFailed("frontend/dist is not built: `make frontend` (make test-deploy does)")
    return [podman_compose, "-p", PROJECT]


def write_env(deploy: Deployment) -> None:
    say("warden init --compose: the secrets")
    run([str(WARDEN), "init", "--compose", "--env-file", str(deploy.env_file)])
    values = deploy.env_file.read_text()
    for name in ("WARDEN_JWT_SECRET", "RABBITMQ_PASSWORD", "POSTGRES_PASSWORD"):
        if f"\n{name}=" not in "\n" + values:
            raise DeployFailed(f"warden init --compose wrote no {name}")
    again = run([str(WARDEN), "init", "--compose", "--env-file", str(deploy.env_file)])
    if deploy.env_file.read_text() != values or "keeping it" not in again:
        raise DeployFailed("a second `warden init --compose` changed the .env")
    # This test's own ports: a real deployment (or the developer's services) may hold 8080/5672.
    with deploy.env_file.open("a") as env:
        env.write(f"GATEWAY_HOST_PORT={deploy.port}\n")
        env.write(f"RABBITMQ_AMQP_PORT={free_port()}\nRABBITMQ_UI_PORT={free_port()}\n")
        env.write(f"WARDEN_IMAGE={IMAGE}\nWARDEN_LOG_FORMAT=text\n")


def add_sim_host(deploy: Deployment) -> dict[str, Any]:
    """Serve one simulated host on the compose network; check it, add it, see its GPUs."""
    say("a simulated GPU host on the compose network (warden sim, from the same image)")
    start_sim(deploy.network())
    api = deploy.api
    candidate = {
        "name": SIM_HOST,
        "address": "simhost",
        "port": SIM_PORT,
        "user": "warden",
        "key_file": KEY_FILE,
    }

    say("POST /api/v1/inventory/hosts/check: connect, show its key and GPUs")

    def checked() -> dict[str, Any] | None:
        _, answer = api.call("POST", "/inventory/hosts/check", candidate)
        return answer if answer.get("ok") else None

    check = until("the simulated host checks ok", checked, 120)
    print(json.dumps(check, indent=1)[:1500])
    if len(check["gpus"]) != SIM_GPUS or check["host_key"]["status"] != "new":
        raise DeployFailed(f"check: expected {SIM_GPUS} GPUs and a new host key: {check}")

    say("warden hosts add (the CLI, through the API), trusting the checked key's fingerprint")
    deploy.cli("login", "--user", ADMIN)
    deploy.cli(
        "hosts",
        "add",
        SIM_HOST,
        "--address",
        "simhost",
        "--port",
        str(SIM_PORT),
        "--user",
        "warden",
        "--key-file",
        KEY_FILE,
        "--accept-host-key",
        check["host_key"]["fingerprint"],
    )
    _, host = api.call("GET", f"/inventory/hosts/{SIM_HOST}")
    if host["host_key"] != check["host_key"]["line"]:
        raise DeployFailed(f"the added host trusts another key: {host}")
    deploy.cli("hosts", "list")
    wait_gpus(api)
    return dict(host)


def start_sim(network: str) -> None:
    # Its host key lives in a volume, so the key accepted above still holds after a restart.
    run(["podman", "rm", "-f", "-v", "--ignore", f"{PROJECT}-simhost"], quiet=True)
    run(
        [
            "podman",
            "run",
            "-d",
            "--name",
            f"{PROJECT}-simhost",
            "--network",
            network,
            "--network-alias",
            "simhost",
            "-v",
            f"{PROJECT}-simhost:/home/warden/sim",
            IMAGE,
            "sim",
            "--hosts",
            "1",
            "--gpus-per-host",
            str(SIM_GPUS),
            "--port",
            str(SIM_PORT),
            "--address",
            "0.0.0.0",
            "--no-churn",
            "--accept-any-key",
            "--write-config",
            "/home/warden/sim/hosts.toml",
        ]
    )


def wait_gpus(api: Api) -> None:
    say(f"GET /api/v1/gpus until the {SIM_GPUS} GPUs of {SIM_HOST} are there")

    def gpus() -> list[dict[str, Any]] | None:
        _, answer = api.call("GET", "/gpus")
        found = [gpu for gpu in answer["gpus"] if gpu["host"] == SIM_HOST]
        return found if len(found) == SIM_GPUS else None

    found = until(f"{SIM_GPUS} GPUs of {SIM_HOST} in GET /api/v1/gpus", gpus, 180)
    print(", ".join(f"{g['host']}:{g['index']} {g['name']}" for g in found))


def kill_and_recover(deploy: Deployment) -> None:
    # SIGKILL to the container's first process, as a crash or the OOM killer would: its restart
    # policy starts it again. (`podman kill` counts as stopped by the user: podman, like docker,
    # then leaves it stopped.)
    say("kill -9 the reservations container's main process: its restart policy brings it back")
    container = deploy.container("reservations")
    fmt = "{{.State.Pid}} {{.State.StartedAt}}"
    before = run(["podman", "inspect", "--format", fmt, container], quiet=True).strip()
    pid = int(before.split()[0])
    print(f"$ kill -9 {pid}   # {container}: pid and start {before}")
    os.kill(pid, signal.SIGKILL)

    def restarted() -> str | None:
        state = run(
            ["podman", "inspect", "--format", "{{.State.Running}} " + fmt, container], quiet=True
        )
        running, now = state.split(" ", 1)
        return now.strip() if running == "true" and now.strip() != before else None

    print(f"restarted: pid and start {until('the killed container runs again', restarted, 120)}")
    deploy.wait_healthy()


def main() -> int:
    compose_cmd = prepare()
    work = Path(tempfile.mkdtemp(prefix="warden-test-deploy."))
    deploy = Deployment(work, compose_cmd)
    write_env(deploy)
    local = ["-f", "docker-compose.yml", "-f", "docker/compose.local.yml"]
    deploy.compose_cmd += ["--env-file", str(deploy.env_file), *local]
    try:
        say("clearing what an earlier run may have left (this test's project only)")
        run(["podman", "rm", "-f", "-v", "--ignore", f"{PROJECT}-simhost"], quiet=True)
        deploy.compose("down", "-v", quiet=True)
        run(["podman", "volume", "rm", "-f", f"{PROJECT}-simhost"], check=False, quiet=True)

        say("podman-compose build (cached layers: only what changed is rebuilt)")
        deploy.compose("build")
        # Each rebuild leaves the previous stages untagged; those of a day ago go (younger
        # ones are the layer cache of the next run).
        run(["podman", "image", "prune", "-f", "--filter", "until=24h"], quiet=True)
        say("podman-compose up -d")
        deploy.compose("up", "-d")
        deploy.wait_healthy()

        say("the first admin: warden user add in the gateway container")
        # `-e NAME` passes this process's value: the password stays off the command line.
        deploy.compose(
            *("exec", "-T", "-e", "WARDEN_PASSWORD", "gateway", "warden", "user", "add", ADMIN),
            *("--email", "admin@example.org", "--admin"),
            env=os.environ | {"WARDEN_PASSWORD": deploy.password},
        )
        say("POST /api/v1/session: sign in")
        deploy.api.sign_in(deploy.password)

        add_sim_host(deploy)
        say("POST /api/v1/reservations: book a GPU of the added host for tomorrow")
        start = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=1)
        _, reservation = deploy.api.call(
            "POST",
            "/reservations",
            {
                "gpus": [f"{SIM_HOST}:0"],
                "start": start.isoformat(),
                "duration_minutes": 60,
                "title": "test-deploy",
            },
        )
        print(reservation)

        kill_and_recover(deploy)

        say("podman-compose down (volumes kept), then up -d again")
        run(["podman", "stop", f"{PROJECT}-simhost"], check=False, quiet=True)
        run(["podman", "rm", "-f", "-v", f"{PROJECT}-simhost"], check=False, quiet=True)
        deploy.compose("down")
        deploy.compose("up", "-d")
        deploy.wait_healthy()
        say("the data is still there: the account signs in")
        deploy.api.sign_in(deploy.password)
        _, hosts = deploy.api.call("GET", "/inventory/hosts")
        if SIM_HOST not in [h["name"] for h in hosts["hosts"]]:
            raise DeployFailed(f"{SIM_HOST} is gone after down/up: {hosts}")
        _, kept = deploy.api.call("GET", f"/reservations/{reservation['id']}")
        if kept["title"] != "test-deploy":
            raise DeployFailed(f"reservation {reservation['id']} changed: {kept}")
        print(f"host {SIM_HOST} and reservation {kept['id']} ({kept['title']}) kept")
        say("the simulated host served again (same host key): its GPUs come back")
        start_sim(deploy.network())
        wait_gpus(deploy.api)
    except (DeployFailed, KeyError, TypeError) as err:
        deploy.logs()
        print(f"\n!!! test-deploy FAILED: {err!r}", file=sys.stderr)
        print(f"!!! containers stopped, volumes kept: {shlex.join(deploy.compose_cmd)} down -v")
        run(["podman", "rm", "-f", "-v", "--ignore", f"{PROJECT}-simhost"], check=False, quiet=True)
        deploy.compose("down", check=False, quiet=True)
        return 1
    say("podman-compose down -v: this test's containers and volumes go, the images stay")
    run(["podman", "rm", "-f", "-v", "--ignore", f"{PROJECT}-simhost"], check=False, quiet=True)
    deploy.compose("down", "-v", quiet=True)
    run(["podman", "volume", "rm", "-f", f"{PROJECT}-simhost"], check=False, quiet=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\ntest-deploy passed in {time.monotonic() - STARTED:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DeployFailed as err:
        print(f"\n!!! test-deploy FAILED: {err}", file=sys.stderr)
        sys.exit(1)
