"""Re-planning, in one place: whether a lost or drifted device warrants a new plan
(:mod:`.replan`, pure), the running fleet's speed monitor and re-planner that turns such events
into a new assignment (:mod:`.live_replanner`), and the watcher that feeds a session's metrics
and losses to it and applies what it proposes (:mod:`.watcher`)."""
