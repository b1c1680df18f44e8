"""Worker agent, transport, discovery, keys, deployment and failover."""
