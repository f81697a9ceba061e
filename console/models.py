"""No tables. The module exists so Django sends this app `post_migrate` (also after a test
flush), which keeps the role groups in sync (console/apps.py)."""
