"""The fleet view's objects: the workers the coordinator knows (a Qt table model), the
controller that watches them (discovery, probes, pairing, session events), and the fleet as a
picture (who runs which layers, how busy each PC is). No widgets here."""
