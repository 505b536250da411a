"""ESP tooling: the ``pyesp`` command line (``cli``) and the vector generator and checker (``vectors``).  Built on
the runtime API of :mod:`pyesp`; nothing there imports it."""
