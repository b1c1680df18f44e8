"""Finding and trusting workers: pinned worker keys (:mod:`.known_workers`), pairing with the
code a worker shows (:mod:`.code_pairing`), the workers added by address
(:mod:`.manual_workers`) and ``--workers HOST:PORT,...`` lists resolved to pinned endpoints
(:mod:`.worker_addresses`)."""
