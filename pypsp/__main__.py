import sys

from pypsp.cli import main

sys.exit(main())
