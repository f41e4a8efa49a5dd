"""One sample's latency (inference): when the last operator of one input finishes."""
