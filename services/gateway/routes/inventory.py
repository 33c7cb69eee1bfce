"""The inventory of hosts, for admins: list, add, edit, remove and check the GPU servers Warden
watches (the monitor owns the list; see `services/monitor/hosts/hosts_admin.py`). A change is polled
within one interval, without a restart.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.gateway.routing import Access, Call, Route
from services.monitor import api
from services.shared.contracts import HostRecord
from services.shared.errors import NotFound


class InventoryHostPath(api.HostNameArgs):
    pass


class InventorySchema(api.HostsSchema):
    """Every host of the inventory, by name."""


class AddHostBody(api.AddHostArgs):
    port = fields.Integer(load_default=22, validate=validate.Range(min=1, max=65535))
    probe = fields.String(load_default="ssh", validate=validate.OneOf(("ssh", "nvml")))

    @validates_schema
    def reachable(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("probe", "ssh") != "ssh":
            return
        missing = {
            key: ['required when probe is "ssh"']
            for key in ("address", "user")
            if not data.get(key)
        }
        if missing:
            raise ValidationError(missing)


class UserKeyBody(Schema):
    username = fields.String(
        load_default=None,
        validate=api.ProveLoginArgs().fields["username"].validators,
        metadata={"description": "whose Unix login to try (default: yours)"},
    )


class OverridesBody(api.HostFields):
    """Fields that override the stored host's for this check only."""


async def list_inventory_hosts(call: Call) -> Any:
    return await call.rpc(api.LIST_HOSTS)


async def get_inventory_host(call: Call) -> Any:
    name = call.params["name"]
    found: dict[str, Any] = await call.rpc(api.LIST_HOSTS)
    for host in found["hosts"]:
        if host["name"] == name:
            return host
    raise NotFound(f"no host named {name!r} in the inventory", {"host": name})


async def add_inventory_host(call: Call) -> Any:
    return await call.rpc(api.ADD_HOST, call.body)


async def update_inventory_host(call: Call) -> Any:
    return await call.rpc(api.UPDATE_HOST, {**call.body, "name": call.params["name"]})


async def remove_inventory_host(call: Call) -> Any:
    return await call.rpc(api.REMOVE_HOST, {"name": call.params["name"]})


async def check_candidate_host(call: Call) -> Any:
    return await call.rpc(api.CHECK_HOST, call.body)


async def check_inventory_host(call: Call) -> Any:
    return await call.rpc(api.CHECK_HOST, {**call.body, "name": call.params["name"]})


async def check_user_key(call: Call) -> Any:
    """Whether Warden's key logs in to this host as a user: what jobs and terminal warnings
    need (the monitor's PROVE_LOGIN on this host)."""
    username = call.body.get("username") or call.user.username
    return await call.rpc(api.PROVE_LOGIN, {"username": username, "host": call.params["name"]})


TAG = "inventory"
_POLLED = "Polled within one interval, without a restart; events `host.*` tell the other services."
_LOCAL = "409 `state_conflict` for this machine (source `local`, set by [monitor] local_nvml)."
ROUTES = (
    Route(
        "GET",
        "/inventory/hosts",
        list_inventory_hosts,
        Access.ADMIN,
        "Every host of the inventory, with its address, user, key file, labels and source",
        TAG,
        response=InventorySchema,
    ),
    Route(
        "POST",
        "/inventory/hosts",
        add_inventory_host,
        Access.ADMIN,
        "Add a host (check it first: POST /inventory/hosts/check)",
        TAG,
        body=AddHostBody,
        response=HostRecord,
        status=201,
        description=_POLLED + " Defaults: port 22, probe ssh, no key_file (the agent), no "
        "labels. `host_key`: the `line` a check answered, trusted for this host; null: [ssh] "
        "known_hosts decides (an unknown key shows the host unreachable, saying how to accept "
        "it). 409 `already_exists` for a name taken.",
    ),
    Route(
        "POST",
        "/inventory/hosts/check",
        check_candidate_host,
        Access.ADMIN,
        "Check a candidate host: its host key (fingerprint, trusted/new/changed) and GPUs",
        TAG,
        body=api.CheckHostArgs,
        response=api.HostCheckSchema,
        description="Logs in (trusting the key it is shown) and lists the GPUs unless the key "
        "changed: then it does not log in. `ok` false and `detail` say why a check failed.",
    ),
    Route(
        "GET",
        "/inventory/hosts/{name}",
        get_inventory_host,
        Access.ADMIN,
        "One host of the inventory",
        TAG,
        params=InventoryHostPath,
        response=HostRecord,
    ),
    Route(
        "PATCH",
        "/inventory/hosts/{name}",
        update_inventory_host,
        Access.ADMIN,
        "Change a host's fields (only those given)",
        TAG,
        params=InventoryHostPath,
        body=api.HostFields,
        response=HostRecord,
        description=_POLLED + " A host seeded from [[hosts]] no longer follows the config "
        "once edited here (source `api`). " + _LOCAL,
    ),
    Route(
        "DELETE",
        "/inventory/hosts/{name}",
        remove_inventory_host,
        Access.ADMIN,
        "Stop watching a host (its reservations and history stay)",
        TAG,
        params=InventoryHostPath,
        response=HostRecord,
        description="Its poll loop stops at once. It is not seeded again from [[hosts]] at "
        "the next start; adding it again brings it back. " + _LOCAL,
    ),
    Route(
        "POST",
        "/inventory/hosts/{name}/check",
        check_inventory_host,
        Access.ADMIN,
        "Check a host of the inventory (fields given override its own for this check)",
        TAG,
        params=InventoryHostPath,
        body=OverridesBody,
        response=api.HostCheckSchema,
        description="A `new` key is accepted by sending its `line` as `host_key` "
        "(PATCH /inventory/hosts/{name}).",
    ),
    Route(
        "POST",
        "/inventory/hosts/{name}/user-key",
        check_user_key,
        Access.ADMIN,
        "Whether Warden's key logs in to this host as a user (yours, or `username`)",
        TAG,
        params=InventoryHostPath,
        body=UserKeyBody,
        response=api.ProveLoginSchema,
        description="Logs in as that user with Warden's key (`GET /ssh-key`), as jobs and "
        "terminal warnings do, and runs `id -un`. `outcome`: proven, key_not_installed (the "
        "user exists there but has not added the key), unknown_user, refused or unreachable, "
        "with a `reason` in words. 422 for an NVML host or a bad username; 404 for no such host.",
    ),
)
