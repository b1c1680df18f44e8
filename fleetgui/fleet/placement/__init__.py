"""Which worker runs which exported stages (:mod:`.assignment`), and the error when the workers
left cannot run every stage (:mod:`.fleet_too_small`): pure functions over plain data."""
