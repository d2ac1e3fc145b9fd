"""What memphis does with Spark: the session, the jar and the JVM side, lineage keys of DataFrames,
collected results, broadcasts, actions run together and the driver's caches as one."""
