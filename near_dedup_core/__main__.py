from near_dedup_core.cli import main

raise SystemExit(main())
