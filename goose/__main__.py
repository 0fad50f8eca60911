from goose.cli import main

raise SystemExit(main())
