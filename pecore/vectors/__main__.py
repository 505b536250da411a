"""``python -m pecore.vectors`` (vectors/README.md): the vector-file utilities of :mod:`pecore.tools.vectors`."""
import sys

from pecore.tools.vectors import main

sys.exit(main())
