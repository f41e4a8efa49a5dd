"""Pipeline schedules: when each micro-batch runs on each stage, replayed and searched."""
