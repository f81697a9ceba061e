"""Who may see what, at the bottom of the layers: tenants, the roles a user holds in each
(`TenantMembership`), the role groups and their permissions (`tenancy.roles`) and the one
tenant-and-role scope every person-facing query goes through (`tenancy.scope`). Every app
above may import it; it imports none of them."""
