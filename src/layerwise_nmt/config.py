from .grid import *  # noqa: F401,F403  (temporary while imports move to layerwise_nmt.grid)
from .grid import ROOT, SCHEMA  # noqa: F401
