"""The accounts' RPC methods (declared in `api.py`), each mapped to the code that does it. The
reservations service serves them beside its own (`services.reservations.handlers`): the
accounts live in its process and database.
"""

from __future__ import annotations

from services.accounts import api
from services.accounts.attempts import AttemptCalls
from services.accounts.calendar_feeds import CalendarFeedCalls
from services.accounts.calls import AccountCalls, Bookings
from services.accounts.ldap_directory import LdapDirectory
from services.shared.bus import RpcHandler
from services.shared.rpc import served
from services.shared.storage.store import Store


def rpc_methods(
    store: Store, bookings: Bookings, directory: LdapDirectory | None = None
) -> dict[str, RpcHandler]:
    people = AccountCalls(store, bookings, directory)
    feeds = CalendarFeedCalls(store)
    limits = AttemptCalls(store)
    return served(
        api.METHODS,
        {
            api.AUTHENTICATE: people.authenticate,
            api.LOGIN: people.login,
            api.REFRESH_SESSION: people.refresh_session,
            api.LOGOUT: people.logout,
            api.SETUP_STATE: people.setup_state,
            api.ISSUE_SETUP_TOKEN: people.issue_setup_token,
            api.SETUP_ADMIN: people.setup_admin,
            api.CREATE_CALENDAR_FEED: feeds.create,
            api.REVOKE_CALENDAR_FEED: feeds.revoke,
            api.CALENDAR_FEED_STATE: feeds.state,
            api.CALENDAR_FEED_OWNER: feeds.owner,
            api.CHECK_SIGNUP: people.check_signup,
            api.SIGNUP: people.signup,
            api.TAKE_ATTEMPTS: limits.take,
            api.SETTLE_ATTEMPTS: limits.settle,
            api.CONTACTS: people.contacts,
            api.GET_USER: people.get_user,
            api.LIST_USERS: people.list_users,
            api.CREATE_USER: people.create_user,
            api.UPDATE_USER: people.update_user,
            api.INVITE_USER: people.invite_user,
            api.RESET_PASSWORD: people.reset_password,
            api.PASSWORD_LINK: people.password_link,
            api.USE_PASSWORD_LINK: people.use_password_link,
            api.DEACTIVATE_USER: people.deactivate_user,
            api.ACTIVATE_USER: people.activate_user,
            api.DELETE_USER: people.delete_user,
            api.LIST_GROUPS: people.list_groups,
            api.CREATE_GROUP: people.create_group,
            api.UPDATE_GROUP: people.update_group,
            api.DELETE_GROUP: people.delete_group,
            api.ADD_GROUP_MEMBER: people.add_group_member,
            api.REMOVE_GROUP_MEMBER: people.remove_group_member,
        },
    )
