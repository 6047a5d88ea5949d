"""The MySQL/MariaDB store keeps the whole store contract, with takers in four processes.

Twice: on a pool with aiomysql's defaults (autocommit off, the harder case for a store),
and on one with autocommit on at READ COMMITTED, as many applications set theirs.
"""

import functools

from steerable.testing import store_contract
from tests.stores.mysql.server import DATABASE, open_store

TestMySQLStore = store_contract(functools.partial(open_store, DATABASE))

TestMySQLStoreAutocommitReadCommitted = store_contract(
    functools.partial(
        open_store,
        DATABASE,
        autocommit=True,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )
)
