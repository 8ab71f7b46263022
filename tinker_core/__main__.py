from tinker_core.cli import main

raise SystemExit(main())
