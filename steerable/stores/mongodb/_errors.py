"""The driver's failures as steerable's store errors, for the store and the migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from steerable.errors import StoreError, StoreUnavailable

_TOO_LARGE = {10334, 17419, 17420}  # mongod's codes for a document over 16 MiB


@contextmanager
def reaching(what: str) -> Iterator[None]:
    """Turn the driver's failures into steerable's store errors, saying what was being done."""
    try:
        yield
    except ConnectionFailure as exc:
        raise StoreUnavailable(f"MongoDB cannot be reached to {what}: {exc}") from exc
    except OperationFailure as exc:
        if exc.code in _TOO_LARGE:
            raise StoreError(
                f"cannot {what}: the session's head document would pass MongoDB's 16 MiB limit"
                f" (too many steers waiting): {exc}"
            ) from exc
        raise StoreUnavailable(f"MongoDB refused to {what}: {exc}") from exc
    except PyMongoError as exc:
        raise StoreUnavailable(f"MongoDB failed to {what}: {exc}") from exc
