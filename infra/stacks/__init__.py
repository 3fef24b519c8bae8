"""One stack per deployable component."""
