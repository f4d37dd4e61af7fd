"""``python -m rlvr`` is the ``rlvr`` CLI (and what ``torchrun ... -m rlvr train`` starts on each rank)."""

from rlvr.cli import main

if __name__ == "__main__":
    main()
