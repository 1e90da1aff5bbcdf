"""InfiniteBench (OpenBMB/InfiniteBench): loaders, official prompts, middle truncation, official scorers.

See :mod:`.benchmark` for the protocol and options, :mod:`.scoring` for the scorers, :mod:`.synthetic` for the
local generation of the retrieval tasks.
"""

from .benchmark import InfiniteBench

__all__ = ["InfiniteBench"]
