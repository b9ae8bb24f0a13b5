"""``python -m jaxfl ...``: the ``jaxfl`` command without an installed console script (e.g. a source
tree copied to another machine and put on ``PYTHONPATH``)."""
import sys

from jaxfl.cli import main

if __name__ == "__main__":
    sys.exit(main())
