"""``python -m pecore.tools.vectors``: the vector-file utilities (counts, validate)."""
import sys

from pecore.tools.vectors.cli import main

sys.exit(main())
