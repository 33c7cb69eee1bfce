"""The simulator's control API: the scripting calls of `SimFleet` as JSON over HTTP.

    GET    /fleet                               every host: state, GPUs, processes, port
    GET    /hosts/{host}                        one host
    POST   /hosts/{host}/processes              {gpu, user, command, used_memory_mib,
                                                 ignore_sigterm, pid, mig} -> {pid}
    DELETE /hosts/{host}/processes/{pid}
    POST   /hosts/{host}/logins                 {user} -> {tty}: a terminal session
    DELETE /hosts/{host}/logins/{tty}           (tty: pts/N) the session ends
    GET    /hosts/{host}/ttys                   the sessions, each with the messages written to it
    GET    /hosts/{host}/tasks                  the job tasks started over SSH (every login's),
                                                each with its state and exit status
    POST   /hosts/{host}/hang                   {seconds: number | null | "forever"}
    POST   /hosts/{host}/down                   {down: bool}
    POST   /hosts/{host}/nvidia-smi             {mode: ok | missing | failing | no_devices}
    POST   /hosts/{host}/topology               {shape: nvlink-mesh | nvlink-quads |
                                                 nvlink-pairs | pcie}: `nvidia-smi topo -m`
    POST   /hosts/{host}/gpus/{index}/remove
    POST   /hosts/{host}/gpus/{index}/mig       {profiles: ["3g.40gb", ...]}: split it into MIG
                                                instances ([]: MIG mode off) -> {instances}
    POST   /hosts/{host}/gpus/{index}/fault     {fault: ok | lost | ecc | row_remap_pending |
                                                 thermal | pcie} (sim/gpu_faults.py)

Errors use the gateway's envelope `{"error", "message", "details"}`: bad input is a 400, an
unknown host, GPU or process a 404. Listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import math
from types import TracebackType
from typing import Any

from aiohttp import web

from services.shared.errors import InvalidRequest
from services.shared.http_errors import error_middleware
from services.sim.gpu_faults import GPU_FAULTS
from services.sim.server import SimServer

SERVER = web.AppKey("sim_server", SimServer)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidRequest("the body must be a JSON object") from err
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    return data


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{what} must be an integer", {what: value}) from None


def _host_view(server: SimServer, host: str) -> dict[str, Any]:
    view: dict[str, Any] = server.fleet.snapshot(host)["hosts"][0]
    view["port"] = server.ports.get(host)
    return view


async def get_fleet(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    snapshot = server.fleet.snapshot()
    for host in snapshot["hosts"]:
        host["port"] = server.ports.get(host["name"])
    return web.json_response(snapshot)


async def get_host(request: web.Request) -> web.Response:
    return web.json_response(_host_view(request.app[SERVER], request.match_info["host"]))


async def start_process(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    missing = [k for k in ("gpu", "user", "command") if k not in body]
    if missing:
        raise InvalidRequest(f"missing {', '.join(missing)}", {"missing": missing})
    pid = server.fleet.start_process(
        host,
        body["gpu"],
        body["user"],
        body["command"],
        used_memory_mib=body.get("used_memory_mib", 1024),
        ignore_sigterm=body.get("ignore_sigterm", False),
        pid=body.get("pid"),
        mig=body.get("mig"),
    )
    return web.json_response({"host": host, "pid": pid}, status=201)


async def stop_process(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    pid = _int(request.match_info["pid"], "pid")
    server.fleet.stop_process(host, pid)
    return web.json_response({"host": host, "pid": pid, "stopped": True})


async def login(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if "user" not in body:
        raise InvalidRequest('give "user": who logs in')
    tty = server.fleet.login(host, body["user"])
    return web.json_response({"host": host, "tty": tty, "user": body["user"]}, status=201)


async def logout(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    tty = request.match_info["tty"]
    server.fleet.logout(host, tty)
    return web.json_response({"host": host, "tty": tty, "logged_out": True})


async def ttys(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    return web.json_response({"host": host, "sessions": server.fleet.sessions(host)})


async def tasks(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    return web.json_response({"host": host, "tasks": server.fleet.tasks(host)})


async def hang(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if "seconds" not in body:
        raise InvalidRequest('give "seconds": a number, null (no hang) or "forever"')
    seconds = body["seconds"]
    if seconds == "forever":
        seconds = math.inf
    elif isinstance(seconds, str):
        raise InvalidRequest('seconds must be a number, null or "forever"', {"seconds": seconds})
    server.fleet.set_hang(host, seconds)
    return web.json_response(_host_view(server, host))


async def down(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if "down" not in body:
        raise InvalidRequest('give "down": true or false')
    server.fleet.set_down(host, body["down"])
    await server.settled()  # when this answers, a host brought up listens again
    return web.json_response(_host_view(server, host))


async def nvidia_smi(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if "mode" not in body:
        raise InvalidRequest('give "mode": ok, missing, failing or no_devices')
    server.fleet.set_nvidia_smi(host, body["mode"])
    return web.json_response(_host_view(server, host))


async def topology(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if not isinstance(body.get("shape"), str):
        raise InvalidRequest('give "shape": nvlink-mesh, nvlink-quads, nvlink-pairs or pcie')
    server.fleet.set_topology(host, body["shape"])
    return web.json_response(_host_view(server, host))


async def remove_gpu(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    server.fleet.remove_gpu(host, _int(request.match_info["index"], "index"))
    return web.json_response(_host_view(server, host))


async def split_gpu(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    index = _int(request.match_info["index"], "index")
    body = await _body(request)
    instances = server.fleet.split_gpu(host, index, body.get("profiles", []))
    return web.json_response({"host": host, "gpu": index, "instances": instances})


async def gpu_fault(request: web.Request) -> web.Response:
    server, host = request.app[SERVER], request.match_info["host"]
    body = await _body(request)
    if not isinstance(body.get("fault"), str):
        raise InvalidRequest('give "fault": ' + ", ".join(GPU_FAULTS))
    server.fleet.set_gpu_fault(host, _int(request.match_info["index"], "index"), body["fault"])
    return web.json_response(_host_view(server, host))


def create_control_app(server: SimServer) -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    app[SERVER] = server
    app.router.add_get("/fleet", get_fleet)
    app.router.add_get("/hosts/{host}", get_host)
    app.router.add_post("/hosts/{host}/processes", start_process)
    app.router.add_delete("/hosts/{host}/processes/{pid}", stop_process)
    app.router.add_post("/hosts/{host}/logins", login)
    app.router.add_delete("/hosts/{host}/logins/{tty:.+}", logout)
    app.router.add_get("/hosts/{host}/ttys", ttys)
    app.router.add_get("/hosts/{host}/tasks", tasks)
    app.router.add_post("/hosts/{host}/hang", hang)
    app.router.add_post("/hosts/{host}/down", down)
    app.router.add_post("/hosts/{host}/nvidia-smi", nvidia_smi)
    app.router.add_post("/hosts/{host}/topology", topology)
    app.router.add_post("/hosts/{host}/gpus/{index}/remove", remove_gpu)
    app.router.add_post("/hosts/{host}/gpus/{index}/mig", split_gpu)
    app.router.add_post("/hosts/{host}/gpus/{index}/fault", gpu_fault)
    return app


class ControlApi:
    """`async with ControlApi(server, port=0) as api:` then `api.url`."""

    def __init__(self, server: SimServer, *, address: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self.address = address
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    async def start(self) -> None:
        runner = web.AppRunner(create_control_app(self.server), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.address, self.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ControlApi:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
