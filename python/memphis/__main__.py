"""``python -m memphis``: the ``memphis`` console script, where the script is not on the PATH."""
import sys

from memphis.cli import main

if __name__ == "__main__":
    sys.exit(main())
