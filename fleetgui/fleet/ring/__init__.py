"""The coordinator's transport over its workers: one link to each (:mod:`.link`), the route a
request takes through the coordinator's stages and the worker ring (:mod:`.route`,
:mod:`.forward_pass`, :mod:`.route_gate`), setting up a ring epoch (:mod:`.epoch_setup`), how
activations travel (:mod:`.wiring`), DECODE runs on a worker holding the whole model
(:mod:`.decode_client`) and pushing stage files to a worker and having it load them
(:mod:`.shard_push`). Nothing here knows of sessions or deployments."""
