"""lampe-eval: which context-extension method makes this model work best at this length?"""

__version__ = "0.1.0"
