import sys

from pyeesp.cli import main

sys.exit(main())
