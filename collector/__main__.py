import sys

from ringtrace.collector.service.serve import main

sys.exit(main())
