"""A coordinator's fleet session (:class:`~fleetgui.fleet.session.session.FleetSession`) and the
parts it wires together, each given only the collaborators it uses: the workers' links
(:mod:`.workers`), the deployment and the ring in force (:mod:`.deployment`), failover
(:mod:`.failover`) and the events it reports (:mod:`.status`); replicas of a model behind one
pipeline (:mod:`.replicas`). :func:`fleetgui.assembler.aopen` opens them."""
