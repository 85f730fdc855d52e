"""CLI sub-apps, one module per command group."""
