"""``python -m dask_dgd`` runs the ``dask-dgd`` command."""

import sys

from .cli import main

sys.exit(main())
