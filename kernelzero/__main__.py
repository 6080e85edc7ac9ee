import sys

from kernelzero.cli import main

sys.exit(main())
