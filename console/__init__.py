"""The console every person uses: one tenant-and-role scope (`console.scope`), the role
groups (`console.roles`) and the admin building blocks every app's admin shares
(`console.admin_base`, `console.widgets`). See README "The web console" and
docs/decisions.md."""
