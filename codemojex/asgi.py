"""The ASGI plumbing of codemojex's page server and Bot API stand-in: ``echomq_trio.asgi``, which
the bus dashboard shares (re-exported here)."""

from echomq_trio.asgi import (
    BodyTooLarge,
    Response,
    answer,
    answer_lifespan,
    read_body,
    serve_app,
)

__all__ = ["BodyTooLarge", "Response", "answer", "answer_lifespan", "read_body", "serve_app"]
