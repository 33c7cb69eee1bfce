"""Load on the REST API: requests/s and latency per route of `warden run all` under 64 clients.

Usage::

    .venv/bin/python bench/api_load.py [--quick] [--seed-via db|api] [--mix ROUTE=PCT,...]
        [--serve] [--server-profile PATH] [--url URL [--server-pid PID]] [--no-etag]
        [--create-clients 1,8,64] [--create-duration S]

Set-up (each part its own OS process, on this machine, in a temporary folder removed at the end):

- `warden sim --hosts 50 --gpus-per-host 8 --no-churn --seed 1 --control-port 0
  --write-config DIR/sim/hosts.toml`: 50 simulated hosts x 8 GPUs = 400 GPUs served over real
  SSH (no background jobs: nothing for the violations service to act on, so the figures do
  not depend on chance).
- warden.toml: `[log] level = "warning"`, `[storage] data_dir` (embedded: SQLite and the
  embedded TSDB), a random `[auth] jwt_secret`, `[gateway] port` (a free one) with
  `login_failures_per_ip = 1000`, `[ssh] known_hosts` (the sim's), `[monitor] local_nvml =
  "off"` and the default `interval_s` (5 s: the monitor polls the 50 hosts all along, as it would in
  production), then the sim's `[[hosts]]`. Every database is migrated with
  `services.shared.storage.db.upgrade` and the accounts user00..user49 and admin are made in the
  reservations database by `accounts.create_user` (argon2 made cheap here, so the 51 logins
  through the server are cheap too). The default access rule lets every user book every GPU.
- `python -m services.cli run all --config warden.toml`: every service and the gateway in one
  process on the in-process bus. The bench waits for GET /api/v1/health = 200, for the 400
  GPUs in the reservations service (GET /api/v1/reservations/overview without `gpus` lists
  every GPU it knows) and in GET /api/v1/gpus.
- Seeding: 10,000 reservations (--quick: 1,000) of the 50 users (created by admin), each on 1,
  2, 4 or 8 GPUs of one host (weights 85/8/5/2), 1-12 h, starting at a half hour from the next
  full hour to 8 weeks ahead, planned so that none overlaps another. By default
  (`--seed-via db`) the server is stopped once it knows the GPUs, the plan is inserted
  straight into the tables `reservations` and `reservations_gpu_slots` (as
  bench/reservations_load.py does; about a second) and the server is started again, and the
  bench waits for it as above. `--seed-via api` creates them instead by
  `POST /api/v1/reservations` as admin with `owner`, 32 requests at a time (a 409 is planned
  again elsewhere): about 70/s on 2 cores, so over two minutes for 10,000, which is why it is
  not the default. The time either takes is reported.

Measurement: 64 clients, each a coroutine in a closed loop (one request after the other),
share one aiohttp ClientSession (keep-alive, up to 128 connections); client i is signed in as
user(i mod 50) (`POST /api/v1/session`, one login per user). Each request is drawn at random:

- 35 % `GET /api/v1/gpus`;
- 35 % `GET /api/v1/reservations?start&end&gpus&limit=500`: one host's 8 GPUs (by uuid) x
  7 days from a random day 00:00 UTC within the next 7 weeks (the seeded period); each client
  polls its own 4 such calendar views (drawn once from 4,096), as a calendar page left open;
- 20 % `GET /api/v1/reservations/overview?start&end&slot_minutes=60&gpus`: one host's 8 GPUs
  x 14 days from a random day 00:00 UTC within the next 6 weeks;
- 10 % `POST /api/v1/reservations` as the client's user: 1-2 GPUs of a random host, 1-4 h,
  starting at a half hour 1-8 weeks ahead. 201, 409 (conflict) and 403 (not allowed) are
  valid answers.

The clients behave like pollers: for `GET /gpus` and the calendar reads each sends
`If-None-Match` with the ETag of its last answer to that URL, and a 304 Not Modified counts
as a success (its own column in the table; `--no-etag`: plain GETs, as before).

After a warm-up (3 s; --quick: 1 s) of the same load that is not recorded, every request
started during the next 30 s (--quick: 5 s) is timed with time.perf_counter from before
sending to the end of reading the body; the clients then finish the request in flight.
requests/s = recorded requests / (the end of the last one - the start of the window). Any
5xx, and any request with no answer (connection error, 30 s timeout), counts in
`server_errors`; other non-2xx answers are listed per route (a 4xx other than 409/403 on a
create would be a bug of the bench). CPU: the bench's own (`resource.getrusage`), the server's
and the simulator's (utime + stime of /proc/PID/stat) over the window, in % of one core.
Targets (issue, on 2 cores): >= 1,500 requests/s overall, p99 < 50 ms for reads, < 100 ms for
creates.

Then a create-only phase: `POST /api/v1/reservations` alone at 1, 8 and 64 clients
(`--create-clients`), each count for 10 s (--quick: 2 s; `--create-duration`) after a 1 s
warm-up, keep-alive on the same session, client i as user(i mod 50). The creates are planned
so that none conflicts with any other or with the seeded or mixed-phase reservations: the
n-th create of the phase takes GPU n mod 400 (by uuid) for the hour n div 400, counted from
10 weeks ahead. A row per client count: req/s, p50, p99, errors (5xx, no answer, and any
answer but 201: a refusal here would be a bug). Target at 64 clients: >= 1,500/s, p99 < 100 ms.

The last line is machine-readable: `RESULT rps=<n> read_p99_ms=<n> create_p99_ms=<n>
server_errors=<n> create_rps_c64=<n> create_p99_ms_c64=<n>` (read: the three GET routes of
the mix together; server_errors: of both phases; the last two: the create-only phase at 64
clients).

`--mix gpus=1` (say) loads one route alone: what it costs without the others. `--url URL`
runs only the load against a server that is already running (no set-up, no seeding; its CPU is
measured with `--server-pid PID`): its accounts must be user00..user49 with the bench's
password (`--password`), as a server left running by `--serve` has. `--serve` does the set-up
and seeding, prints the URL and waits for Ctrl-C. `--server-profile PATH` (re)starts the
server after seeding as `python -m cProfile -o PATH -m services.cli run all ...` and, at the
end, prints its top functions from services/ and aiohttp by cumulative time (for coroutines
cProfile counts every resumption, so theirs add up to more than the wall time) and the
event-loop thread's own time by package: figures measured under the profiler are inflated.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _common as common
import aiohttp
from _api_load_api import (
    Api,
    known_gpus,
    wait_ready,
)
from _api_load_clients import (
    CreatePlan,
    Workload,
    run_creates,
    run_load,
    sign_in_all,
)
from _api_load_figures import (
    ADMIN,
    CLIENTS,
    CREATE_CLIENTS,
    GPUS_PER_HOST,
    HOSTS,
    MIX,
    PASSWORD,
    REQUEST_TIMEOUT_S,
    ROUTES,
    SIM_SEED,
    START_DEADLINE_S,
    STOP_WAIT_S,
    USERS,
    Config,
    Cpu,
    Result,
)
from _api_load_report import (
    print_profile,
    print_result_line,
    report,
)
from _api_load_seed import (
    seed_into_database,
    seed_through_api,
)

from services.shared.config import load_settings

# --- processes ----------------------------------------------------------------------------------


def stop(child: common.Child) -> None:
    """SIGINT, a clean stop in which a server under cProfile writes its file; then SIGKILL."""
    child.stop(signal.SIGINT, STOP_WAIT_S)


def start_server(
    tmp: Path, config: Path, env: dict[str, str], profile: Path | None
) -> common.Child:
    opts = ["-m", "cProfile", "-o", str(profile)] if profile else []
    return common.Child(
        "warden run all" + (" (under cProfile)" if profile else ""),
        common.warden_argv("run", "all", "--config", str(config), python_opts=opts),
        tmp / ("server-profiled.log" if profile else "server.log"),
        env,
    )


# --- the run ------------------------------------------------------------------------------------


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=2 * CLIENTS, limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    )


async def load_against(
    api: Api, cfg: Config, result: Result, by_host: dict[str, list[str]], cpu_now: Callable[[], Cpu]
) -> None:
    tokens = await sign_in_all(api, cfg.password)
    workload = Workload(api, by_host, cfg.mix, cfg.seed + 1)
    print(
        f"load: {CLIENTS} clients, {cfg.warmup_s:g}s warm-up + {cfg.duration_s:g}s recorded ...",
        flush=True,
    )
    result.routes, result.window_s, result.cpu = await run_load(api, workload, tokens, cfg, cpu_now)
    plan = CreatePlan(by_host)
    for clients in cfg.create_clients:
        print(
            f"create-only: {clients} clients, {cfg.create_duration_s:g}s recorded ...", flush=True
        )
        result.creates[clients] = await run_creates(api, plan, tokens, clients, cfg, cpu_now)


async def run_remote(cfg: Config) -> Result:
    """--url: only the load, against a server already running."""
    assert cfg.url is not None
    result = Result(cfg, {})
    pid = cfg.server_pid
    result.server = f"already running at {cfg.url}" + (
        f", pid {pid}" if pid else " (--server-pid not given: its CPU is nan)"
    )

    def cpu_now() -> Cpu:
        return Cpu(common.own_cpu_seconds(), common.cpu_seconds(pid) if pid else float("nan"))

    async with new_session() as session:
        api = Api(cfg.url, session)
        token = await api.login(USERS[0], cfg.password)
        by_host = await known_gpus(api, token)
        if not by_host:
            raise RuntimeError(f"{cfg.url}: no GPUs known to the reservations service")
        status, _ = await api.get("/gpus", token)
        result.gpus_route = str(status)
        await load_against(api, cfg, result, by_host, cpu_now)
    return result


async def run_local(cfg: Config, tmp: Path) -> Result:
    """Set-up, seeding and load against a server this bench starts (and stops)."""
    result = Result(cfg, {})
    env = common.child_env(tmp)
    children: list[common.Child] = []
    try:
        t0 = time.monotonic()
        options = ["--hosts", str(HOSTS), "--gpus-per-host", str(GPUS_PER_HOST), "--no-churn"]
        sim = common.start_sim(tmp, env, *options, "--seed", str(SIM_SEED))
        children.append(sim)
        await sim.wait_for_line(common.SIM_READY, START_DEADLINE_S)
        known_hosts, hosts = common.sim_hosts(tmp)
        port = common.free_port()
        config = common.write_config(
            tmp,
            known_hosts=known_hosts,
            hosts=hosts,
            gateway={"host": "127.0.0.1", "port": port, "login_failures_per_ip": 1000},
        )
        users = [(user, False) for user in USERS] + [(ADMIN, True)]
        await common.prepare_databases(
            load_settings(config, environ={"HOME": str(tmp)}), users, PASSWORD
        )
        result.setup_s["sim+db"] = time.monotonic() - t0

        t0 = time.monotonic()
        server = start_server(tmp, config, env, None)
        children.append(server)

        def alive() -> None:
            sim.check_alive()
            server.check_alive()

        base = f"http://127.0.0.1:{port}"
        async with new_session() as session:
            api = Api(base, session)
            admin, by_host, result.gpus_route = await wait_ready(api, alive)
            result.setup_s["start+discover"] = time.monotonic() - t0
            print(
                f"server ready at {base} (pid {server.pid}) in "
                f"{result.setup_s['start+discover']:.1f}s; seeding {cfg.reservations:,} "
                f"reservations ({'through the API' if cfg.seed_via == 'api' else 'into SQLite'})"
                " ...",
                flush=True,
            )
            if cfg.seed_via == "api":
                t0 = time.monotonic()
                seeded = await seed_through_api(api, admin, by_host, cfg.reservations, cfg.seed)
                result.setup_s["seed (API)"] = time.monotonic() - t0
        restart = cfg.seed_via == "db" or cfg.server_profile is not None
        if restart:
            t0 = time.monotonic()
            stop(server)
            result.setup_s["stop"] = time.monotonic() - t0
        if cfg.seed_via == "db":
            t0 = time.monotonic()
            seeded = await seed_into_database(config, tmp, by_host, cfg.reservations, cfg.seed)
            result.setup_s["seed (SQLite)"] = time.monotonic() - t0
        seed_s = result.setup_s.get("seed (API)") or result.setup_s["seed (SQLite)"]
        result.seeded, result.seed_conflicts = seeded.created, seeded.conflicts
        result.seed_given_up = seeded.given_up + seeded.errors
        print(
            f"  seeded {seeded.created:,} in {seed_s:.1f}s ({seeded.created / seed_s:,.0f}/s; "
            f"{seeded.conflicts} conflicts planned again, {seeded.given_up} given up, "
            f"{seeded.errors} errors)",
            flush=True,
        )
        if restart:
            t0 = time.monotonic()
            server = start_server(tmp, config, env, cfg.server_profile)
            children.append(server)
            async with new_session() as session:
                _, by_host, result.gpus_route = await wait_ready(Api(base, session), alive)
            result.setup_s["restart+discover"] = time.monotonic() - t0

        result.server = (
            f"pid {server.pid}" + (" under cProfile" if cfg.server_profile else "") + f", {base}"
        )
        if cfg.serve:
            print(
                f"serving at {base} (config {config}); load it with "
                f"`bench/api_load.py --url {base}`; Ctrl-C to stop",
                flush=True,
            )
            while True:
                alive()
                await asyncio.sleep(1.0)

        def cpu_now() -> Cpu:
            return Cpu(
                common.own_cpu_seconds(),
                common.cpu_seconds(server.pid),
                common.cpu_seconds(sim.pid),
            )

        async with new_session() as session:
            await load_against(Api(base, session), cfg, result, by_host, cpu_now)
        server.check_alive()
    finally:
        for child in reversed(children):
            stop(child)
    return result


async def run(cfg: Config) -> Result:
    if cfg.url:
        return await run_remote(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-api-"))
    try:
        return await run_local(cfg, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "1,000 reservations, 1 s + 5 s of load")
    ap.add_argument("--duration", type=float, help="recorded seconds of load (30; --quick: 5)")
    ap.add_argument("--reservations", type=int, help="reservations seeded (10,000; --quick: 1,000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (1)")
    ap.add_argument(
        "--seed-via",
        choices=("db", "api"),
        default="db",
        help="seed into SQLite with the server stopped (db, default), or by POST as admin (api)",
    )
    ap.add_argument("--url", help="only load a server already running there (e.g. left by --serve)")
    ap.add_argument(
        "--mix",
        metavar="ROUTE=PCT,...",
        help="another mix, e.g. gpus=50,range=50 (default "
        + ",".join(f"{r}={p:g}" for r, p in MIX)
        + "): to load one route alone",
    )
    ap.add_argument(
        "--server-pid", type=int, metavar="PID", help="with --url: the server's pid (its CPU)"
    )
    ap.add_argument("--password", default=PASSWORD, help="password of user00..user49 (--url)")
    ap.add_argument(
        "--serve", action="store_true", help="set up and seed, then serve until Ctrl-C (no load)"
    )
    ap.add_argument(
        "--server-profile",
        type=Path,
        metavar="PATH",
        help="after seeding, restart the server under cProfile writing PATH; print its top",
    )
    ap.add_argument(
        "--no-etag",
        action="store_true",
        help="plain GETs in the mix (no If-None-Match): to compare",
    )
    ap.add_argument(
        "--create-clients",
        default=",".join(map(str, CREATE_CLIENTS)),
        help="client counts of the create-only phase (1,8,64; empty: skip it)",
    )
    ap.add_argument(
        "--create-duration", type=float, help="recorded seconds per count (10; --quick: 2)"
    )
    return ap.parse_args(argv)


def parse_mix(text: str) -> tuple[tuple[str, float], ...]:
    mix = []
    for part in text.split(","):
        route, _, percent = part.partition("=")
        if route.strip() not in ROUTES:
            raise SystemExit(f"--mix: unknown route {route!r} (routes: {', '.join(ROUTES)})")
        try:
            mix.append((route.strip(), float(percent)))
        except ValueError:
            raise SystemExit(f"--mix: {part!r} is not ROUTE=PERCENT") from None
    if sum(p for _, p in mix) <= 0 or any(p < 0 for _, p in mix):
        raise SystemExit("--mix: the percentages must be positive")
    return tuple(mix)


def make_config(args: argparse.Namespace) -> Config:
    cfg = Config(
        quick=args.quick,
        duration_s=args.duration or (5.0 if args.quick else 30.0),
        warmup_s=1.0 if args.quick else 3.0,
        reservations=args.reservations
        if args.reservations is not None
        else (1_000 if args.quick else 10_000),
        seed=args.seed,
        url=args.url,
        serve=args.serve,
        server_profile=args.server_profile.resolve() if args.server_profile else None,
        password=args.password,
        seed_via=args.seed_via,
        mix=parse_mix(args.mix) if args.mix else MIX,
        server_pid=args.server_pid,
        etag=not args.no_etag,
        create_clients=tuple(int(n) for n in args.create_clients.split(",") if n.strip()),
        create_duration_s=args.create_duration or (2.0 if args.quick else 10.0),
    )
    if cfg.url and (cfg.serve or cfg.server_profile):
        raise SystemExit("--url loads a running server: not with --serve or --server-profile")
    if cfg.server_pid and not cfg.url:
        raise SystemExit("--server-pid goes with --url (the bench knows its own server)")
    if cfg.duration_s <= 0 or cfg.reservations < 0:
        raise SystemExit("--duration must be positive and --reservations not negative")
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = make_config(parse_args(sys.argv[1:] if argv is None else argv))
    result = common.run_async(run(cfg), "server and simulator stopped, temporary files removed")
    report(result)
    if cfg.server_profile is not None:
        print_profile(cfg.server_profile)
    print_result_line(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
