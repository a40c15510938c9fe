import sys

from hedgerow.cli import main

sys.exit(main())
