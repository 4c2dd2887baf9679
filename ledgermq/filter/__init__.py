"""Message filters evaluated on the broker (SQL92 over properties); pure: no I/O."""
