"""The team's shared store: Apache Iceberg tables behind a SQL catalog (SQLite on one machine,
PostgreSQL for a team), on a directory or S3. The local DuckDB store stays the query engine:
``evalkit push RUN`` publishes a run here, ``evalkit pull BASELINE|RUN`` brings one back, and a
run with a shared store configured asks its response cache before the endpoint and publishes
the answers it asked when it ends (:class:`evalkit.run.shared_cache.SharedCacheStore`).

Needs the ``shared`` extra (``pip install 'evalkit-gate[shared]'``); pyiceberg is imported only
when a shared store is opened.
"""

from evalkit.store.shared.store import (
    CachePublished,
    Pulled,
    Pushed,
    SharedStore,
    open_shared_store,
)
from evalkit.store.shared.uri import StoreURI, parse_store_uri

__all__ = [
    "CachePublished",
    "Pulled",
    "Pushed",
    "SharedStore",
    "StoreURI",
    "open_shared_store",
    "parse_store_uri",
]
