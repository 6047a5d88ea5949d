"""``steerable serve`` with A2A mounted, for the replica test while ``serve --protocol`` is
not there yet: ``python -m tests.protocols.a2a.replica serve ...`` takes serve's flags.

Once ``create_app`` takes ``protocols=`` and ``serve`` passes ``--protocol``, the test runs
``steerable serve --protocol a2a`` itself and this module is not used.
"""

from __future__ import annotations

import sys
from typing import Any

import steerable.service.http as http
from steerable.cli import main
from steerable.service import Service
from steerable.service.http._context import Context
from steerable.service.http._limits import Limits, TenantLimits
from steerable.service.http.a2a import mount

_create_app = http.create_app


def _with_a2a(service: Service, **options: Any) -> Any:
    app = _create_app(service, **options)
    mount(app, Context(service, app.state.live, 15.0, 0.1, TenantLimits(Limits())))
    return app


if __name__ == "__main__":
    http.create_app = _with_a2a
    sys.exit(main(sys.argv[1:]))
