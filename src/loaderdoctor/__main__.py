import sys

from loaderdoctor.cli import main

sys.exit(main())
