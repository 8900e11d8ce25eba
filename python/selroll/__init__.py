"""selroll from Python.

The package depends only on pyzmq and msgpack (numpy optional). Sub-modules are imported on
first use, so `import selroll` stays cheap and needs neither numpy nor torch.
"""

__version__ = "0.1.0"

# The protocol version this package speaks (docs/protocol.md).
PROTOCOL_VERSION = 1
