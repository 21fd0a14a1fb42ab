"""One module per sub-command; each exposes register(subparsers) and sets `func` on its parser."""
