"""Shadow mirrors: the same input sent to other versions off the request path and compared."""
