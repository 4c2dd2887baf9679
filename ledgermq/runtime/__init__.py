"""Process plumbing every server shares: config files, private files, the clock, the
foreground runner."""
