import sys

from pypsp.tools.cli import main

sys.exit(main())
