"""What memphis needs to know about the kinds of arrays it holds: numpy's, and devices' (registered)."""
