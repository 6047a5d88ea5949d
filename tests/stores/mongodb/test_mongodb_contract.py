"""The MongoDB store keeps the whole store contract, with takers in four processes too."""

import functools
import uuid

import pytest

from steerable.testing import store_contract
from tests.stores.mongodb._server import open_store

pytestmark = pytest.mark.usefixtures("mongo_server")

DATABASE = f"steerable_contract_{uuid.uuid4().hex[:12]}"  # fresh on every run

TestMongoStore = store_contract(functools.partial(open_store, DATABASE), processes=True)
