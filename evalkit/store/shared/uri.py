"""Where a team's shared store lives: one URI naming an Iceberg SQL catalog and its warehouse.

``sqlite:///ci/catalog.db?warehouse=file:///ci/warehouse`` is one machine (or a shared disk);
``postgresql+psycopg2://evalkit@db.internal/evalkit?warehouse=s3://bucket/evalkit`` a team.
The catalog part is a SQLAlchemy URL, handed to pyiceberg's ``SqlCatalog`` as it is; the query
keeps ``warehouse=`` and storage settings that are not secrets (``s3.endpoint``,
``s3.region``, ...).

Credentials never travel in the URI: a password in it, or a storage key in its query, is
refused, because the URI sits in ``evalkit.yaml`` and in command lines that ``ps`` shows. They
come from where the libraries look themselves: ``PGPASSWORD`` or ``~/.pgpass`` for PostgreSQL,
``AWS_ACCESS_KEY_ID``/``~/.aws/credentials`` for S3.

Examples:
    >>> uri = parse_store_uri("sqlite:////tmp/c.db?warehouse=file:///tmp/wh")
    >>> uri.catalog, uri.warehouse
    ('sqlite:////tmp/c.db', 'file:///tmp/wh')
    >>> parse_store_uri("postgresql://ci:hunter2@db/evalkit?warehouse=s3://b/w")
    Traceback (most recent call last):
    ...
    evalkit.errors.ConfigError: shared store postgresql://db/evalkit?warehouse=s3://b/w: ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from evalkit.errors import ConfigError
from evalkit.redact import strip_userinfo

#: Catalog URL schemes pyiceberg's SQL catalog is used with (SQLAlchemy dialects).
_CATALOG_SCHEMES = ("sqlite", "postgresql")
#: Storage settings that are keys, not places: they belong in the environment.
_SECRET_SETTINGS = frozenset(
    {"s3.access-key-id", "s3.secret-access-key", "s3.session-token", "gcs.oauth2.token"}
)


@dataclass(frozen=True)
class StoreURI:
    """A parsed shared-store URI: the catalog's SQLAlchemy URL, the warehouse location and
    the storage settings (pyiceberg FileIO properties) its query names."""

    catalog: str
    warehouse: str
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def full(self) -> str:
        """The URI whole, its SQLite path absolute: what another process of the job is given
        (a user part stays; it never holds a password, which is refused).

        Examples:
            >>> parse_store_uri("sqlite:////tmp/c.db?s3.region=eu").full
            'sqlite:////tmp/c.db?warehouse=file:///tmp/warehouse&s3.region=eu'
        """
        query = urlencode({"warehouse": self.warehouse, **self.settings}, safe=":/")
        return f"{self.catalog}?{query}"

    @property
    def shown(self) -> str:
        """The URI as reports print it (never any userinfo)."""
        return strip_userinfo(self.full)


def parse_store_uri(text: str, *, source: str = "shared store") -> StoreURI:
    """Parse ``text`` (``--store URI`` or ``store: {shared: URI}``).

    A ``sqlite:///relative.db`` path is made absolute here, so every process of a job (a Ray
    worker, a shard started elsewhere) opens the same file; ``warehouse=`` defaults to a
    ``warehouse/`` directory beside a SQLite catalog.

    Raises:
        ConfigError: an unknown scheme, a password or storage key in the URI, no warehouse for
            a server catalog.
    """
    text = (text or "").strip()
    shown = strip_userinfo(text)
    parts = urlsplit(text)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in _CATALOG_SCHEMES:
        raise ConfigError(
            f"{source} {shown!r}: expected sqlite:///PATH/catalog.db or postgresql://HOST/DB "
            "(an Iceberg SQL catalog), with ?warehouse=file:///DIR or s3://BUCKET/PATH"
        )
    if parts.password is not None:
        raise ConfigError(
            f"{source} {shown}: the URI holds a password; give it through the environment "
            "(PGPASSWORD or ~/.pgpass for PostgreSQL), never in evalkit.yaml or a command line"
        )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    secrets = sorted(_SECRET_SETTINGS & query.keys())
    if secrets:
        raise ConfigError(
            f"{source} {shown}: {', '.join(secrets)} is a credential; set AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials) in the environment instead"
        )
    warehouse = query.pop("warehouse", "")
    catalog = urlunsplit(parts._replace(query=""))
    if scheme == "sqlite":
        catalog, db_file = _absolute_sqlite(catalog, parts.path)
        warehouse = warehouse or (db_file.parent / "warehouse").as_uri()
    if not warehouse:
        raise ConfigError(f"{source} {shown}: name the warehouse (?warehouse=s3://BUCKET/PATH)")
    if warehouse.startswith("file://"):
        warehouse = Path(warehouse.removeprefix("file://")).resolve().as_uri()
    elif "://" not in warehouse:  # a bare directory
        warehouse = Path(warehouse).resolve().as_uri()
    return StoreURI(catalog, warehouse, query)


def _absolute_sqlite(catalog: str, path: str) -> tuple[str, Path]:
    """``sqlite:///rel.db`` (SQLAlchemy: relative) → ``sqlite:////abs/rel.db``."""
    relative = path.removeprefix("/")  # sqlite:///x.db has path /x.db, meaning ./x.db
    if not relative or relative == ":memory:":
        raise ConfigError(f"shared store {catalog}: a SQLite catalog needs a file")
    db_file = Path(relative).resolve()
    return f"sqlite:///{db_file}", db_file
