"""The bus dashboard: every queue's counts, throughput and retries over the last minutes, lanes,
scheduled and recurring jobs, and dead jobs with buttons to replay or delete them, live.

``view`` is the pure view model (history of samples, rows, charts, the page's query); ``app``
the sampler and the ASGI app (``Dashboard``); ``page.html`` the page. ``echomq dashboard`` serves
it on its own; ``codemojex.run`` mounts it at ``/bus`` of its page server.
"""

from echomq_trio.dashboard.app import TOKEN_HEADER, Dashboard, new_token

__all__ = ["TOKEN_HEADER", "Dashboard", "new_token"]
