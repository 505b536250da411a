"""EESP tooling: the ``pyeesp`` command line (``cli``), the interop checker (``diagnose``) and the vector
generator and checker (``vectors``).  Built on the runtime API of :mod:`pyeesp`; nothing there imports it."""
