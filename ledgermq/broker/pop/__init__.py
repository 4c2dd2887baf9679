"""POP consumption: the bookkeeping (pure) and the service that runs it."""
