"""Store backends. Each lives in its own module and imports its driver only there.

``steerable.stores.memory`` and ``steerable.stores.sqlite`` need nothing beyond the
standard library; the server stores come with their extras.
"""
