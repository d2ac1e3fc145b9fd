package io.memphis.conf

/**
 * What memphis throws when it refuses to start, by class, so that Python (and any other client)
 * tells them apart by the class name rather than by searching the message.
 */
/** A `spark.memphis.*` setting is not allowed; the message names key, value and what is allowed. */
final class MemphisConfigException(message: String) extends IllegalArgumentException(message)

/** This jar cannot run here (another Spark line or Scala version); the message says which jar to use. */
final class MemphisSetupException(message: String) extends IllegalStateException(message)
