"""Who may do what: ACL accounts and their file, one permission rule per request code, the
system topics only the broker writes."""
