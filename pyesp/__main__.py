import sys

from pyesp.tools.cli import main

sys.exit(main())
