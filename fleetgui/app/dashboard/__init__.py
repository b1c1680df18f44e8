"""The dashboard's objects: the runtime's metrics as time series, the fleet benchmark run on
the deployment, and the switch that serves the deployed model on the OpenAI-compatible API. No
widgets here."""
