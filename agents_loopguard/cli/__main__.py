"""``python -m agents_loopguard.cli``: the ``loopguard`` command."""

from . import main

if __name__ == "__main__":
    main()
