"""The one error for an optional dependency that is missing, in one wording everywhere.

Every backend behind an extra (the server stores, the provider models, the integrations)
imports its driver at the top of its package and, when that fails, raises
:func:`missing_extra`'s error, so a user reads the same sentence whichever extra it is::

    try:
        import asyncpg
    except ImportError as exc:
        raise missing_extra("steerable.stores.postgres", "postgres", "asyncpg", exc) from None
"""

from __future__ import annotations

__all__ = ["PROTOCOLS", "missing_extra"]

PROTOCOLS: dict[str, tuple[str, str]] = {
    "a2a": ("steerable.service.http.a2a", "a2a"),
    "mcp": ("steerable.service.http.mcp", "mcp"),
    "ag-ui": ("steerable.service.http.agui", "ag-ui"),
}
"""The open protocols the HTTP app can speak: each name, its module and its extra.

Here rather than in :mod:`steerable.service.http`, so that the command line can list them
without importing the server's packages."""


def missing_extra(module: str, extra: str, needs: str, cause: BaseException | str) -> ImportError:
    """The ImportError for ``module``, which needs ``needs`` from the extra ``extra``.

    ``cause`` is the driver's own ImportError, or a sentence saying what is wrong with the
    installed one (``"pymongo 4.9 is installed"``).
    """
    return ImportError(f"{module} needs {needs} ({cause}): pip install 'steerable[{extra}]'")
