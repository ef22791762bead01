import sys

from automodel_dist.cli import main

sys.exit(main())
