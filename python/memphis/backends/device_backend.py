"""What memphis needs to know about device arrays (cupy's, or the simulated device's).

The seam beside numpy_backend: devices register their array type here (memphis.tiers.gpu does),
so that tracing never imports cupy nor the GPU tier. A value is on a device when its type is
registered; its device, and through it the GPU tier, come from the registered function.
"""
_device_of = {}  # array type -> function(array) -> its Device; filled by memphis.tiers.gpu


def register(array_type, device_of):
    """Declares ``array_type`` a device array whose device is ``device_of(array)``."""
    _device_of[array_type] = device_of


def device_of(value):
    """The Device that holds ``value``, None for a host value."""
    find = _device_of.get(type(value))
    return find(value) if find is not None else None


def is_device_array(value) -> bool:
    return type(value) in _device_of


def device_among(values):
    """The device of the first device array in ``values`` (nested tuples, lists and traced arrays), or None."""
    if not _device_of:  # no device known to this process: every traced call asks, so answer at once
        return None
    for value in values:
        if getattr(value, "deferred", False):  # a traced array not made yet: made on the host
            continue
        value = getattr(value, "_value", value)  # a TracedArray's value
        if type(value) in (tuple, list):
            found = device_among(value)
        else:
            found = device_of(value)
        if found is not None:
            return found
    return None
