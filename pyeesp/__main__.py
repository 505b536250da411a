import sys

from pyeesp.tools.cli import main

sys.exit(main())
