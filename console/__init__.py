"""The console every person uses: the admin building blocks every app's admin shares
(`console.admin_base`, `console.widgets`) and every app's admin, above the API. Who sees which
rows comes from `tenancy.scope`. See README "The web console" and docs/decisions.md."""
