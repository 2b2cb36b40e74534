"""Shipping: scoring policies and turning them and measurements into policy files."""
