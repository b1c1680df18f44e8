"""An OpenAI-compatible HTTP API over the ``LLMPipeline`` (``fleetgui serve``).

aiohttp serves it on the pipeline's own event loop: ``parsing`` checks request bodies (``routes``
makes each a ``GenerationConfig``), ``errors`` builds OpenAI error objects, ``responses`` the
answers and chunks, ``sse`` writes server-sent events, ``admission`` bounds concurrent streams
and the queue behind them, ``routes`` holds the handlers and ``server`` the lifecycle (auth,
one log line per request).
"""

DEFAULT_HOST = "127.0.0.1"  # loopback unless told otherwise: other machines need a key
DEFAULT_PORT = 8000
