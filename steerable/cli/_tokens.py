"""``--tokens FILE``: the bearer tokens ``steerable serve`` takes, each naming a tenant."""

from __future__ import annotations

import json
from pathlib import Path

from steerable.errors import UsageError

__all__ = ["load_tokens"]


def load_tokens(path: str) -> dict[str, str]:
    """The token -> tenant map in ``path``: a JSON object, or one ``token tenant`` a line.

    Blank lines and lines starting with ``#`` are skipped. A tenant is 1 to 64 of
    ``A-Z a-z 0-9 _ . -``; a token is given once.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--tokens {path}: cannot read it ({exc})") from None
    pairs: list[tuple[object, object]]
    if text.lstrip().startswith("{"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--tokens {path}: not valid JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--tokens {path}: a JSON object of token: tenant")
        pairs = list(loaded.items())
    else:
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 2:
                raise UsageError(f"--tokens {path}:{number}: one `token tenant` a line")
            pairs.append((fields[0], fields[1]))
    return _checked_tokens(path, pairs)


def _checked_tokens(path: str, pairs: list[tuple[object, object]]) -> dict[str, str]:
    # The rules of the service and its client, so a token taken here is one they take.
    from steerable.service.client import check_token
    from steerable.service.http._problems import TENANT

    tokens: dict[str, str] = {}
    for token, tenant in pairs:
        try:
            token = check_token(token)
        except UsageError as exc:
            raise UsageError(f"--tokens {path}: {exc}") from None
        if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
            raise UsageError(
                f"--tokens {path}: a tenant is 1-64 of A-Z a-z 0-9 _ . -, not {tenant!r:.80}"
            )
        if token in tokens:
            raise UsageError(f"--tokens {path}: a token is given twice (tenant {tenant!r})")
        tokens[token] = tenant
    if not tokens:
        raise UsageError(f"--tokens {path}: no tokens in it")
    return tokens
