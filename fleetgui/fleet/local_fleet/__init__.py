"""Worker processes on this PC: a local fleet (:mod:`.fleet`) of ``fleetgui worker`` processes
(:mod:`.worker_process`)."""
