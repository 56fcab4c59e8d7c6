"""The kernel's own test rig: minimal settings, a probe context whose handlers can be told to fail,
and the fixtures and helpers the kernel's tests share (the project's tests use them too)."""
