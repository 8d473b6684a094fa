from nicrig.cli import main

raise SystemExit(main())
