"""Maximum throughput: the largest device load of a pipelined split, minimised."""
