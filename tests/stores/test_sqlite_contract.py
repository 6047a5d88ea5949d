"""The SQLite store keeps the whole store contract, with takers in separate processes too."""

import functools
import tempfile
from pathlib import Path

from steerable.stores.sqlite import SQLiteStore
from steerable.testing import store_contract

_path = Path(tempfile.mkdtemp(prefix="steerable-contract-")) / "contract.db"

TestSQLiteStore = store_contract(functools.partial(SQLiteStore, _path))
