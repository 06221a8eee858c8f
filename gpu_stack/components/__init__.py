"""Thin Pulumi ComponentResources: they turn the pure builders' data into resources, nothing more."""
