"""Errors memphis raises before or while a Spark session starts."""


class MemphisSetupError(RuntimeError):
    """The environment cannot run memphis: no Java, a wrong Spark version, a missing jar.

    The message says what was found and what to do; the CLI prints it as one line.
    """


class MemphisConfigError(ValueError):
    """A ``spark.memphis.*`` setting was rejected; the message names key, value and what is allowed."""
