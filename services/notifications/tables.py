"""The notification path's tables, in the violations service's database (it runs the path; its
migrations, `services/violations/migrations`, create them, hence their names). Times: integer ms.
"""

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

# Notifications (issue 20): each user's choices, the keys already sent (dedupe), and a record
# of every delivery on every channel, whatever became of it.
notification_prefs = Table(
    "violations_notification_prefs",
    metadata,
    Column("username", String(255), primary_key=True),
    Column("prefs", Text, nullable=False),  # JSON: kinds -> channels, lead times
    Column("chat_format", String(16), nullable=True),
    Column("chat_url", Text, nullable=True),  # a secret: never answered in full, never logged
    Column("updated_at_ms", BigInteger, nullable=False),
)

notification_keys = Table(
    "violations_notification_keys",
    metadata,
    Column("username", String(255), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
)

notifications_sent = Table(
    "violations_notifications_sent",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("username", String(255), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("channel", String(16), nullable=False),  # email | chat | browser
    Column("title", String(200), nullable=False),
    Column("outcome", String(16), nullable=False),  # sent | failed | limited
    Column("detail", Text, nullable=False, default=""),
    Column("at_ms", BigInteger, nullable=False),
    Index("violations_notifications_sent_user", "username", "id"),
)

# How Warden's own messages go out, as admins set it on the Settings page: one row per
# channel ("smtp", "webhooks"), its fields as JSON. A saved channel wins over the
# configuration file's; none saved: the file's. Holds secrets (the SMTP password, webhook URLs
# and signing keys): never answered, never logged.
delivery_settings = Table(
    "violations_delivery_settings",
    metadata,
    Column("channel", String(16), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_by", String(255), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)
