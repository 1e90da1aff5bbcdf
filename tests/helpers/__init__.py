"""What several test modules share (constants, builders, assertions), kept out of the ``test_*.py`` modules:
a test module imports from here or from the other helper modules of ``tests/`` (``fakebench``,
``kernel_contracts``, ...), never from another test module or from ``conftest.py``, whose fixtures are
used as fixtures (``tests/test_test_layout.py`` checks it)."""
