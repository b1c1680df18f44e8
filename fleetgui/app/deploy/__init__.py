"""Deploying a model from the app: choose it, export it, preview the plan, deploy, cancel.

* :mod:`~fleetgui.app.deploy.controller`: the :class:`DeploymentController` the window talks to
  (one job at a time, with signals for the deployment view);
* :mod:`~fleetgui.app.deploy.jobs`: runs those jobs one at a time, with Cancel;
* :mod:`~fleetgui.app.deploy.model_choice`: what a chosen folder, file or hub id is;
* :mod:`~fleetgui.app.deploy.interfaces`: the :class:`Deployer` and :class:`DeviceSource`
  interfaces and what they pass around;
* :mod:`~fleetgui.app.deploy.local`: deploying on this PC;
* :mod:`~fleetgui.app.deploy.fleet`: deploying on the fleet's workers;
* :mod:`~fleetgui.app.deploy.replicas`: deploying independent replicas on workers.

What gets deployed is planned in :mod:`fleetgui.fleet.placement.preview`; an export is made by
:mod:`fleetgui.app.deploy.export_job`.
"""
