"""The worker agent: a headless process on a fleet PC that stores shards, hosts stages and
answers the coordinator over the encrypted ring. It imports neither Qt nor torch.
"""
