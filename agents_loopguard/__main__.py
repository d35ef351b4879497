"""``python -m agents_loopguard``: the ``loopguard`` operator command, for where its script is not on ``PATH``."""

from .cli import main

if __name__ == "__main__":
    main()
