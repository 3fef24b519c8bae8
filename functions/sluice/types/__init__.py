"""Wire schemas, defined once."""
