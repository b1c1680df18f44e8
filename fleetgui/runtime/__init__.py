"""Stage interface, generation loop, speculative decoding and interleaved streams."""
