"""What the coordinator and the workers share: the wire protocol, encrypted sockets,
keys and trust, discovery and the INFO probe.
"""
