"""Why ``steerable serve`` or ``steerable migrate`` could not start on its database, in a line.

A database that is not there fails in the driver, in the driver's words (and, for some
drivers, as a traceback). The commands say instead which of these it is, with what to do:

- unreachable: nothing answers at the address (refused, no such host, timed out);
- not accepting connections yet: the server answers but is starting up or shutting down;
- the login is refused: the user or password is wrong;
- the database does not exist on the server (create it, then migrate);
- not migrated, or migrated by a newer steerable (``serve`` only: migrate is the cure).

The drivers' errors are told apart by what they carry (asyncpg's ``sqlstate``, PyMySQL's
error number, pymongo's class), so this module imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from steerable.errors import StoreError

__all__ = ["MIGRATE", "explain"]

MIGRATE = "run `steerable migrate --store URL` first"

_BACKENDS = {
    "postgresql": ("Postgres", 5432),
    "postgres": ("Postgres", 5432),
    "mysql": ("MySQL", 3306),
    "mariadb": ("MySQL", 3306),
    "mongodb": ("MongoDB", 27017),
}

_PG_UNKNOWN_DATABASE = "3D000"
_PG_STARTING = "57P03"
_PG_LOGIN = ("28P01", "28000")
_MYSQL_UNKNOWN_DATABASE = 1049
_MYSQL_LOGIN = (1044, 1045)
_MYSQL_UNREACHABLE = (2002, 2003, 2005, 2006, 2013)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _where(url: str) -> tuple[str, str, str]:
    """The backend's name, ``host:port`` and the database's name (no password)."""
    parts = urlsplit(url)
    name, port = _BACKENDS.get(parts.scheme.lower(), (parts.scheme, 0))
    try:
        at = f"{parts.hostname or '127.0.0.1'}:{parts.port or port}"
    except ValueError:  # a port that is not a number: the driver said so already
        at = parts.hostname or "127.0.0.1"
    return name, at, unquote(parts.path.lstrip("/"))


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    # pymongo's report of its timeouts and topology follows the reason
    return line.split(" (configured timeouts:")[0].split(", Timeout:")[0]


def _driver(exc: BaseException, url: str) -> str | None:
    """The line for a driver failure in ``exc``'s chain, or None if there is none."""
    name, at, database = _where(url)
    for error in _chain(exc):
        sqlstate = getattr(error, "sqlstate", None)
        args = error.args
        code = args[0] if args and isinstance(args[0], int) else None
        classes = {cls.__name__ for cls in type(error).__mro__}
        detail = _first_line(str(args[1]) if code is not None and len(args) > 1 else str(error))
        if sqlstate == _PG_UNKNOWN_DATABASE or code == _MYSQL_UNKNOWN_DATABASE:
            return (
                f"the {name} server at {at} has no database {database!r}: create it"
                f" (CREATE DATABASE {database}), then run `steerable migrate --store URL`"
            )
        if sqlstate == _PG_STARTING:
            return (
                f"the {name} server at {at} is not accepting connections yet ({detail});"
                " try again once it is up"
            )
        mongo_login = "OperationFailure" in classes and getattr(error, "code", None) == 18
        if sqlstate in _PG_LOGIN or code in _MYSQL_LOGIN or mongo_login:
            return f"the {name} server at {at} refused the login: {detail}"
        if isinstance(sqlstate, str):
            return f"the {name} server at {at} refused the connection: {detail}"
        if code in _MYSQL_UNREACHABLE or "ConnectionFailure" in classes:
            return f"cannot reach the {name} server at {at}: {detail}"
        if isinstance(error, OSError):  # refused, no such host, timed out
            return f"cannot reach the {name} server at {at}: {detail or type(error).__name__}"
    return None


def explain(exc: BaseException, url: str, *, schema: bool = False) -> str | None:
    """One line saying why the database at ``url`` cannot be used, for the command's stderr.

    ``schema`` is True when ``exc`` came from checking the schema of a database that
    answered: a store error there with no driver failure under it is the store's refusal of
    the layout (not migrated, or newer), which names what to do. None: ``exc`` is neither a
    database's failure nor a store's error (a bug, to be shown as one).
    """
    told = _driver(exc, url)
    if told is not None:
        return told
    if not isinstance(exc, StoreError):
        return None
    if schema:
        refusal = str(exc).split(": apply migration step", 1)
        if len(refusal) == 2:  # older, or none at all: the step's Python call is not for here
            return f"the database is not migrated: {refusal[0]}; {MIGRATE}"
        return str(exc)  # newer: it says to upgrade steerable
    return f"{type(exc).__name__}: {_first_line(str(exc))}"
