"""Adapters that run fedhet federations on other engines (optional extras): :mod:`fedhet.integrations.flower`."""
