"""The Postgres store keeps the whole store contract, with takers in four processes too."""

import functools

from steerable.testing import store_contract
from tests.stores.postgres.support import DATABASE, DSN, open_store

TestPostgresStore = store_contract(functools.partial(open_store, DSN, DATABASE))
