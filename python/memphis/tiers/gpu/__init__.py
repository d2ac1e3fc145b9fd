"""The GPU tier: its devices (simulated, cupy), its memory budget and entries, and how it is configured."""
