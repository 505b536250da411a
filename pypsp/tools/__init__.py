"""PSP tooling: the ``pypsp`` command line (``cli``), the interop checker (``diagnose``) and the vector
generator and checker (``vectors``).  Built on the runtime API of :mod:`pypsp`; nothing there imports it."""
