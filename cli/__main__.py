from tinker_cli import main

raise SystemExit(main())
