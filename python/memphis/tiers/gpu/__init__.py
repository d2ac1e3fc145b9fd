"""The GPU tier: its devices (simulated, cupy), its allocator and entries, and how it is configured."""
