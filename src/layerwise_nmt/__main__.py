import os

if os.environ.get("LWNMT_FORKSERVER"):  # the rehearsal's warm process (forkserver.py); returns if it declines
    from .rehearsal.forkserver import delegate

    delegate(os.environ["LWNMT_FORKSERVER"])

from .cli import run

run()
