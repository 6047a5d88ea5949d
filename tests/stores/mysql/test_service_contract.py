"""The MySQL/MariaDB store keeps the whole service store contract, against the real server.

Twice, like the store contract: on a pool with aiomysql's defaults (autocommit off,
REPEATABLE READ) and on one with autocommit on at READ COMMITTED.
"""

from __future__ import annotations

import functools

import pytest

from steerable.testing import OpenStore, ServiceContract
from tests.stores.mysql import server
from tests.stores.mysql.test_contract import ABILITIES


@pytest.mark.store_abilities(*ABILITIES)
class TestMySQLServiceStore(ServiceContract):
    @pytest.fixture
    def store_factory(self, mysql_database: str) -> OpenStore:
        return functools.partial(server.open_store, mysql_database)


@pytest.mark.store_abilities(*ABILITIES)
class TestMySQLServiceStoreAutocommitReadCommitted(ServiceContract):
    @pytest.fixture
    def store_factory(self, mysql_database: str) -> OpenStore:
        return functools.partial(
            server.open_store,
            mysql_database,
            autocommit=True,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )
