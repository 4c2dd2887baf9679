"""The plain_acl.yml accounts the hostile-client tests use: an admin, and accounts that
may use only their own topic (and group)."""

ACL = """\
accounts:
  - accessKey: admin-key
    secretKey: admin-secret-1
    admin: true
  - accessKey: alice
    secretKey: alice-secret-1
    topicPerms: [Alice=PUB|SUB]
    groupPerms: [alice-group=SUB]
  - accessKey: mallory
    secretKey: mallory-secret-1
    topicPerms: [Mallory=PUB|SUB]
"""
ADMIN, ALICE, MALLORY = (("admin-key", "admin-secret-1"), ("alice", "alice-secret-1"),
                         ("mallory", "mallory-secret-1"))
